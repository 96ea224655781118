"""THROWAWAY (round 3): markdown tables of the step-0 measures per seed, and mean/spread per design."""
import json, sys, statistics as st
G = [("working_share", lambda v: 0.2 <= v <= 0.8), ("groups_mixing_style", lambda v: v >= 0.4), ("len_cv_mean", lambda v: v >= 0.15),
     ("len_p90_p10", lambda v: v >= 2), ("hard_work_minus_direct", lambda v: v is not None and v >= 0.15),
     ("sampled_over_greedy", lambda v: v >= 0.5), ("greedy_r1_acc", lambda v: 0.15 <= v <= 0.45), ("token_entropy", lambda v: v >= 0.25),
     ("groups_all_right", lambda v: v >= 0.05), ("groups_all_wrong", lambda v: v >= 0.05), ("groups_mixed", lambda v: v >= 0.5)]
hdr = "| design | seed | work share | style mix | len cv | p90/p10 | hard w−d | samp/greedy | greedy | entropy | all-right | all-wrong | mixed | sampled acc | fmt (samp) | qo greedy | len mean | fails |"
rows = []
for path in sys.argv[1:]:
    for l in open(path):
        rows.append(json.loads(l))
print(hdr); print("|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
by = {}
for r in rows:
    name = r["model"].replace("runs/", "").replace("/final", "")
    by.setdefault(name, []).append(r)
    cells, fails = [], 0
    for k, f in G:
        v = r[k]; ok = f(v); fails += not ok
        s = "-" if v is None else (f"{v:.3f}" if k != "len_p90_p10" else f"{v:.2f}")
        cells.append(s if ok else f"**x {s}**")
    cells += [f"{r['sampled_acc']:.3f}", f"{r['sampled_format']:.3f}", f"{r['greedy_qo_acc']:.3f}", f"{r['len_mean']:.1f}", str(fails)]
    print(f"| {name} | {r.get('seed', 0)} | " + " | ".join(cells) + " |")
print()
print("| design | n seeds | " + " | ".join(k for k, _ in G) + " |")
print("|" + "|".join(["---"] * (len(G) + 2)) + "|")
for name, rs in by.items():
    cells = []
    for k, f in G:
        vs = [r[k] for r in rs if r[k] is not None]
        if not vs:
            cells.append("-"); continue
        m = st.mean(vs); npass = sum(f(v) for v in vs)
        cells.append(f"{m:.3f} [{min(vs):.3f}–{max(vs):.3f}] {npass}/{len(rs)}")
    print(f"| {name} | {len(rs)} | " + " | ".join(cells) + " |")
