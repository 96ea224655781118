"""THROWAWAY: round-2 P1 runs from the registry into results_p1.jsonl (one line per run: evals and per-step figures)."""
import json, sqlite3, sys
c = sqlite3.connect("/work/pilots/registry.db")
out = open(sys.argv[1], "w")
for name in ["r2p1_base", "r2p1_shuffle", "r2p1_lr3x", "r2p1_nobase"]:
    rid, status = c.execute("select id, status from run where name=?", (name,)).fetchone()
    ev = [dict(step=s, accuracy=a, format_rate=f, mean_response_length=l) for s, a, f, l in c.execute(
        "select step, accuracy, format_rate, mean_response_length from evalresult where run_id=? order by step", (rid,))]
    steps = {}
    for s, n, v in c.execute("select step, name, value from metric where run_id=? and name in "
                             "('train/response_length','train/token_entropy','train/reward','time/step','time/rollout','time/train','time/eval')", (rid,)):
        steps.setdefault(s, {})[n] = v
    out.write(json.dumps(dict(run=name, status=status, model="runs/r2c_S5_L4/final", batch="8x8", evals=ev,
                              steps=[dict(step=s, **steps[s]) for s in sorted(steps)])) + "\n")
for l in open("/work/pilots/r2/results_p1_endmeasure.jsonl"):
    r = json.loads(l); r["run"] = "r2p1_base end (step-64), step-0 measures"; out.write(json.dumps(r) + "\n")
