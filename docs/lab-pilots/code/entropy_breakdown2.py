"""THROWAWAY (round 2): where the step-0 token entropy sits, by token class, for any tokenizer."""
import sys, torch, statistics as st
sys.path.insert(0, "/work/pilots")
from transformers import AutoModelForCausalLM, AutoTokenizer
from grpoctl.grpo import collate_prompt_and_output_ids, get_response_log_probs
from grpoctl.rollout.hf import HFRolloutBackend
from grpoctl.rollout.base import SamplingSettings
from lab_task import is_working
from p0_measure import step0_prompts
torch.set_num_threads(1)
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d); m = AutoModelForCausalLM.from_pretrained(d).eval()
probs = step0_prompts(0)
out = HFRolloutBackend(m, tok, batch_size=256).generate([f"User: {p['question']}\nAssistant: <think>" for p in probs], 8,
                                        SamplingSettings(temperature=1.0, min_tokens=4, max_tokens=96, stop=("</answer>",)), 0)
cls = {k: [] for k in ["style", "work_digit", "work_other", "answer_digit_direct", "answer_digit_work", "format"]}
with torch.no_grad():
    for s in range(0, len(out.response_ids), 64):
        ids = collate_prompt_and_output_ids(out.prompt_ids[s:s+64], out.response_ids[s:s+64], 0)
        ent = get_response_log_probs(m, ids["input_ids"], ids["labels"], return_token_entropy=True)["token_entropy"]
        for r in range(ent.shape[0]):
            i = s + r
            rid = out.response_ids[i]; w = is_working(tok.decode(rid))
            pos = ids["response_mask"][r].nonzero().flatten().tolist()
            pieces = [tok.decode([t]) for t in rid]
            in_think, in_ans = True, False
            for k, p in enumerate(pos):
                e = float(ent[r, p]); pc = pieces[k] if k < len(pieces) else ""
                if "</think>" in pc: in_think = False
                if "<answer>" in pc: in_ans = True
                if k == 0: cls["style"].append(e)
                elif in_think: cls["work_digit" if pc.isdigit() else "work_other"].append(e)
                elif in_ans and pc.isdigit(): cls["answer_digit_work" if w else "answer_digit_direct"].append(e)
                else: cls["format"].append(e)
tot = sum(len(v) for v in cls.values()); E = sum(sum(v) for v in cls.values())
for k, v in cls.items():
    if v: print(f"{k:22s} tokens {len(v)/tot:6.1%}  mean entropy {st.mean(v):.3f}  share of total entropy {sum(v)/E:6.1%}")
print("overall", E / tot, "tokens", tot)
