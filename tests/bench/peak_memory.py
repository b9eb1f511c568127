"""peak_anon(cmd): a benchmark's child process run to its end, with its peak anonymous memory."""
import subprocess
import sys
import threading
import time


def peak_anon(cmd):
    """Runs cmd; returns (stdout, peak RssAnon in bytes, sampled every 20 ms). Mapped file pages
    (a token file, cached parts) are page cache, not the program's memory, so RssAnon, not RSS."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def watch():
        while p.poll() is None:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            peak[0] = max(peak[0], int(line.split()[1]) * 1024)
            except OSError:
                pass
            time.sleep(0.02)

    t = threading.Thread(target=watch)
    t.start()
    out, err = p.communicate()
    t.join()
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {err}")
    return out, peak[0]
