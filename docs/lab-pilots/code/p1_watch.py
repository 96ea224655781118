"""THROWAWAY: start a grpoctl run, stop it (SIGINT, finish_step) at its plateau.
plateau = mean of the last 3 evals within 2 points of the mean of the 3 before, checked from step >= MIN_STEP.
usage: p1_watch.py NAME MIN_STEP -- <train_wrap args...>"""
import os, sqlite3, subprocess, sys, time, signal
name, min_step = sys.argv[1], int(sys.argv[2])
args = sys.argv[sys.argv.index("--") + 1:]
log = open(f"/work/pilots/logs/{name}.log", "w")
cmd = ["taskset", "-c", "1", "/work/main/.venv/bin/python", "/work/pilots/train_wrap.py", "train", *args, f"name={name}"]
p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd="/work/pilots")
print(f"pid {p.pid}: {' '.join(cmd)}", flush=True)
sent = False
while p.poll() is None:
    time.sleep(10)
    if sent or min_step <= 0:
        continue
    try:
        c = sqlite3.connect("/work/pilots/registry.db", timeout=5)
        rows = c.execute("select e.step, e.accuracy from evalresult e join run r on r.id=e.run_id where r.name=? order by e.step", (name,)).fetchall()
        c.close()
    except Exception as exc:
        continue
    if len(rows) >= 6 and rows[-1][0] >= min_step:
        last = sum(a for _, a in rows[-3:]) / 3
        before = sum(a for _, a in rows[-6:-3]) / 3
        if abs(last - before) <= 0.02:
            print(f"plateau at step {rows[-1][0]}: last3 {last:.3f} vs before {before:.3f}; SIGINT", flush=True)
            p.send_signal(signal.SIGINT)
            sent = True
print(f"exit {p.wait()}", flush=True)
