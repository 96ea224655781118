"""THROWAWAY: markdown table of the round-2 step-0 measures (results_p0r2.jsonl)."""
import json, sys
G = [("working_share", lambda v: 0.2 <= v <= 0.8), ("groups_mixing_style", lambda v: v >= 0.4), ("len_cv_mean", lambda v: v >= 0.15),
     ("len_p90_p10", lambda v: v >= 2), ("hard_work_minus_direct", lambda v: v is not None and v >= 0.15),
     ("sampled_over_greedy", lambda v: v >= 0.5), ("greedy_r1_acc", lambda v: 0.15 <= v <= 0.45), ("token_entropy", lambda v: v >= 0.25),
     ("groups_all_right", lambda v: v >= 0.05), ("groups_all_wrong", lambda v: v >= 0.05), ("groups_mixed", lambda v: v >= 0.5)]
hdr = "| design | work share | style mix | len cv | p90/p10 | hard w−d | samp/greedy | greedy | entropy | all-right | all-wrong | mixed | sampled acc | fmt (samp) | qo greedy | len mean | fails |"
print(hdr); print("|" + "---|" * hdr.count("|")[:-1] if False else "|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
for l in open(sys.argv[1]):
    r = json.loads(l)
    name = r["model"].replace("runs/", "").replace("/final", "")
    cells, fails = [], 0
    for k, f in G:
        v = r[k]; ok = f(v); fails += not ok
        s = "-" if v is None else (f"{v:.3f}" if k != "len_p90_p10" else f"{v:.2f}")
        cells.append(s if ok else f"**x {s}**")
    cells += [f"{r['sampled_acc']:.3f}", f"{r['sampled_format']:.3f}", f"{r['greedy_qo_acc']:.3f}", f"{r['len_mean']:.1f}", str(fails)]
    print(f"| {name} | " + " | ".join(cells) + " |")
