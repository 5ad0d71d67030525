"""The paper's Table 1 (seeds 000/001): its seconds to replicate N single-row statements, per
DML and statement count. The timing anchor of `bench paper` and of the `paper_timing` DAG."""

PAPER = {
    "insert": {100: 77, 200: 154, 400: 306, 600: 587, 1000: 758},
    "update": {100: 83, 200: 168, 400: 349, 600: 582, 1000: 1175},
    "delete": {100: 143, 200: 289, 400: 664, 600: 698, 1000: 851},
}
