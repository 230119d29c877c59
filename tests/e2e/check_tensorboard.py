"""TensorBoard round trip: trains the embedded demo with `bellows train` (TensorBoard on by default), then reads
the run's events.out.tfevents.* file with the real tensorboard package (EventAccumulator) and checks every tag,
step and value against metrics.jsonl: train/<key>, time/<phase>_ms and memory/<phase>_peak_mb for each training record, eval/<key> for
each evaluation (values as float32).

    check_tensorboard.py BELLOWS_EXECUTABLE
"""
import glob
import json
import math
import re
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    bellows = sys.argv[1]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([bellows, "train", "train.epochs=2", "train.log_every_n_steps=40", f"output_dir={out}", "name=tb"],
                       check=True, stdout=subprocess.DEVNULL)
        files = glob.glob(f"{out}/tb/events.out.tfevents.*")
        assert len(files) == 1, f"expected one event file, found {files}"
        events = EventAccumulator(files[0], size_guidance={"scalars": 0})
        events.Reload()
        scalars = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}
        expected = {}
        for line in open(f"{out}/tb/metrics.jsonl"):
            record = json.loads(line)
            if record["type"] == "train":
                for key, value in record.items():
                    if key in ("type", "step", "epoch", "batch", "elapsed_s") or key.endswith("_frac"):
                        continue
                    phase_mem = re.fullmatch(r"mem_(data|copy|forward|backward|optimizer|other)_peak_mb", key)
                    if key.startswith("time_"):
                        tag = f"time/{key[5:]}"
                    elif phase_mem:
                        tag = f"memory/{phase_mem.group(1)}_peak_mb"
                    else:
                        tag = f"train/{key}"
                    expected.setdefault(tag, {})[record["step"]] = value
            elif record["type"] == "eval":
                for key, value in record.items():
                    if key not in ("type", "step", "epoch", "ema"):
                        expected.setdefault(f"eval/{key}", {})[record["step"]] = value
        assert set(scalars) == set(expected), f"tags differ: {sorted(set(scalars) ^ set(expected))}"
        checked = 0
        for tag, steps in expected.items():
            assert set(scalars[tag]) == set(steps), f"{tag}: steps {sorted(scalars[tag])} vs {sorted(steps)}"
            for step, value in steps.items():
                got = scalars[tag][step]
                assert math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-6), f"{tag} at step {step}: {got} vs {value}"
                checked += 1
        for needed in ("train/loss", "time/data_ms", "time/forward_ms", "memory/forward_peak_mb", "memory/backward_peak_mb", "eval/loss"):
            assert needed in scalars, f"{needed} missing"
        print(f"tensorboard round trip: {len(scalars)} tags, {checked} values match metrics.jsonl")


if __name__ == "__main__":
    main()
