import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = [("working_share","work share"),("groups_mixing_style","style-mixed grp"),("len_cv_mean","len sd/mean"),
        ("len_p90_p10","p90/p10"),("hard_work_minus_direct","hard work-direct"),("sampled_acc","sampled acc"),
        ("sampled_over_greedy","sampled/greedy"),("greedy_r1_acc","greedy acc"),("token_entropy","entropy"),
        ("greedy_r1_format","format (greedy)"),("sampled_format","format (sampled)"),("groups_all_right","all-right"),
        ("groups_all_wrong","all-wrong"),("groups_mixed","mixed"),("greedy_qo_acc","qo greedy acc"),("len_mean","len mean")]
print("| design | " + " | ".join(k[1] for k in keys) + " | all pass |")
print("|---" * (len(keys) + 2) + "|")
for r in rows:
    name = r["model"].replace("runs/", "") + ("" if r["temperature"] == 1.0 else f" T={r['temperature']}")
    vals = []
    for k, _ in keys:
        v = r.get(k)
        vals.append("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v))
    print(f"| {name} | " + " | ".join(vals) + f" | {'yes' if r.get('all_pass') else 'no'} |")
