"""Child of test_sigint.py: writes single points ``0..N-1`` of one series in a loop until SIGINT.

Prints ``ready`` once the stream is open and writing, then, on the way out, one JSON line with how
many ``enqueue`` calls returned. The parent interrupts it at a random moment and reads back.
"""

from __future__ import annotations

import json
import sys

from beam_nominal import NominalStream


def main() -> None:
    target, rid, total, form = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    returned = 0
    outcome = "finished"
    try:
        with NominalStream(target, dataset_rid=rid, linger=None, max_request_points=4096) as stream:
            print("ready", flush=True)
            while returned < total:
                if form == "wide":
                    stream.enqueue_from_dict(returned, {"sig": float(returned)})
                else:
                    stream.enqueue("sig", returned, float(returned))
                returned += 1
    except KeyboardInterrupt:
        outcome = "interrupted"
    print(json.dumps({"returned": returned, "outcome": outcome}), flush=True)


if __name__ == "__main__":
    main()
