"""The dev harness, not product code: throwaway MariaDB servers (sandbox.py), a whole site of
agents as child processes (localsite.py), row-for-row checks (verify.py), the paper's timing
table (paper_timing.py) and the live demo (demo.py). The demo, the tests and the benchmarks use
it; the agents never import it."""
