"""A real inference engine for tests: a tiny random-weight llama GGUF served by `llama_cpp.server`.

The weights are noise, so the tests force the output with a GBNF grammar; everything else (tokenizing the
ChatML prompt, sampling, streaming, stop strings, token limits) is the real engine at work.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.support import engine_missing as missing

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


#: What serving a model with llama-cpp-python's server imports besides the engine.
SERVER_NEEDS = ("gguf", "numpy", "uvicorn", "fastapi", "sse_starlette", "starlette_context")


def engine_missing() -> str | None:
    """Why the engine cannot serve a model here (with the command that fixes it), or None when it can."""
    return missing(SERVER_NEEDS)


def _byte_symbols() -> list[str]:
    """GPT-2's byte-to-printable-character table, so every byte is one token (any text can be spelled)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def write_tiny_llama(path: Path, *, seed: int = 0) -> Path:
    """Write a 2-layer, 64-wide llama with a byte-level vocabulary and a ChatML template (about 200 KB)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    symbols = _byte_symbols()
    tokens = [*symbols, symbols[ord(" ")] * 2, *SPECIALS]
    types = [gguf.TokenType.NORMAL] * (len(symbols) + 1) + [gguf.TokenType.CONTROL] * len(SPECIALS)
    n_vocab, n_embd, n_ff, n_head, n_layer = len(tokens), 64, 128, 4, 2

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("mylm-tiny-test")
    writer.add_context_length(2048)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([f"{symbols[ord(' ')]} {symbols[ord(' ')]}"])
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(n_vocab, n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, n_embd))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def exact_grammar(text: str) -> str:
    """A GBNF grammar whose only sentence is `text`."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'root ::= "{escaped}"'


class EngineServer:
    """`python -m llama_cpp.server` on 127.0.0.1, started and stopped by the test session."""

    def __init__(self, model: Path, *, n_ctx: int = 2048, threads: int = 1, extra: tuple[str, ...] = ()) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                str(n_ctx),
                "--n_threads",
                str(threads),
                "--n_batch",
                "512",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.log: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            if "Uvicorn running on" in line:
                self._ready.set()
        self._ready.set()  # the process ended: wake the waiter, which then reports the log

    def wait_ready(self, timeout: float) -> None:
        """Block until the server listens; raise with its log if it died or took longer than `timeout`."""
        if not self._ready.wait(timeout) or self.process.poll() is not None:
            self.stop()
            raise RuntimeError("llama_cpp.server did not start:\n" + "".join(self.log[-30:]))

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        self._reader.join(timeout=20)
        if self.process.stderr is not None:
            self.process.stderr.close()
