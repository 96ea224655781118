import sys, tempfile, os
os.environ["LAB_TOK"] = "nums"
sys.path.insert(0, "/work/pilots")
import torch
from transformers import AutoTokenizer
from lab_tok import build_tokenizer
from grpoctl.tiny.model import build_model, save_model_dir
from grpoctl.rollout.hf import HFRolloutBackend
from grpoctl.rollout.base import SamplingSettings
tok = build_tokenizer()
d = tempfile.mkdtemp()
save_model_dir(build_model(tok, seed=0), tok, d)
t2 = AutoTokenizer.from_pretrained(d)
print(type(t2).__name__, len(tok), len(t2))
ok_all = True
for s in ["User: 90+1-6+6\nAssistant: <think>", " 90+1=91 91-6=85 </think> <answer>85</answer>",
          " </think> <answer>144</answer>", "90+1", " 9+1=10 \\boxed{10}", "a </answer>x</think>", "1234+5=1239", "007 0 100 199 200",
          " 99+9=108 108-3=105 \\boxed{105}"]:
    a = tok(s, add_special_tokens=False).input_ids; b = t2(s, add_special_tokens=False).input_ids
    ok_all &= (a == b) and t2.decode(b) == s
    print(a == b, len(s), len(a), [t2.decode([i]) for i in b], t2.decode(b) == s)
# every number 0..199 is one token, round-trips
one = all(len(t2(str(i), add_special_tokens=False).input_ids) == 1 and t2.decode(t2(str(i), add_special_tokens=False).input_ids) == str(i) for i in range(200))
print("0..199 single tokens and round-trip:", one, "all strings ok:", ok_all)
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(d)
with torch.no_grad():
    m.lm_head.weight[t2.convert_tokens_to_ids("</answer>")] *= 0
    m.lm_head.bias = None
be = HFRolloutBackend(m, t2)
o = be.generate(["User: 1+2\nAssistant: <think>"] * 64, 1, SamplingSettings(temperature=1.0, min_tokens=1, max_tokens=40, stop=("</answer>",)), seed=0)
n = sum(t.endswith("</answer>") for t in o.response_texts); bad = sum("</answer>" in t[:-9] for t in o.response_texts)
print("stopped", n, "of 64; stop inside", bad, "trunc", sum(o.truncated), o.response_texts[:3])
