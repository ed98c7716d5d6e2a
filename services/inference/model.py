"""The embedding model: the tokenizer and one ONNX Runtime session, on CUDA when present, else CPU."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from services.inference.export import build_model, weights_dir

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model: longer input is truncated
PREFERRED_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray  # float32, one unit-length row per input
    tokens: int  # real (non-padding) tokens, what OpenAI's usage counts


class Embedder:
    """Loads once; ``embed`` is thread-safe (ONNX Runtime sessions allow concurrent ``run``)."""

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._tokenizer_lock = threading.Lock()  # the tokenizers object is not documented thread-safe

    @classmethod
    def load(cls, onnx_file: Path | None = None, *, threads: int = 0) -> Embedder:
        """From the baked ``onnx_file`` when given, else a graph built now from the weights package."""
        import onnxruntime
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(weights_dir() / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest input of the batch
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        # Worker threads sleep between runs instead of spinning: the same cores serve the request's
        # database round trips right after the pass.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        available = set(onnxruntime.get_available_providers())
        if "CUDAExecutionProvider" in available and hasattr(onnxruntime, "preload_dlls"):
            onnxruntime.preload_dlls()  # the CUDA/cuDNN wheels' libraries, as the image installs them
        providers = [name for name in PREFERRED_PROVIDERS if name in available]
        model = str(onnx_file) if onnx_file is not None else build_model().SerializeToString()
        return cls(onnxruntime.InferenceSession(model, options, providers=providers), tokenizer)

    @property
    def device(self) -> str:
        return "gpu" if self._session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"

    def embed(self, texts: list[str]) -> Embeddings:
        with self._tokenizer_lock:
            encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([item.ids for item in encoded], dtype=np.int64)
        mask = np.array([item.attention_mask for item in encoded], dtype=np.int64)
        (vectors,) = self._session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})
        return Embeddings(vectors=vectors, tokens=int(mask.sum()))

    def warm(self) -> None:
        """One pass so the first request does not pay for allocation and kernel selection."""
        self.embed(["warm-up"])
