"""Memory a run will use, worked out on paper for `grpoctl train --dry-run`.

The same accounting the tracker (train/memory.py) measures, component by component:
it says which component a memory trick shrinks (checkpointing: activations; 8-bit AdamW:
optimizer states; sleep mode: vLLM's pool during training) before a GPU is rented.
Sizes come from the model's config.json, never its weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grpoctl.arch import Arch
from grpoctl.formatting import GiB, format_bytes, format_count
from grpoctl.rules import compute_dtype, resolve_backend, resolve_device, resolve_dtype, vllm_installed, weights_dtype
from grpoctl.tiny.lab_recipe import is_lab_path

if TYPE_CHECKING:
    from grpoctl.config import RunConfig

# ============================================================================ estimate


# Bytes saved for backward per token and layer, HF Qwen2 with SDPA attention (no
# seq x seq term) and dtype bytes b. Counted from what autograd keeps (checked against
# saved_tensors_hooks in tests/test_memory.py):
#   2 RMSNorms:  each its input upcast to fp32 (4h) and the normalized output (b h)
#   attention:   q/k/v input (b h), q (b h), k and v (2 b kv_dim), output (b h)
#   MLP:         input (b h); gate, silu(gate), up, silu(gate)*up (4 b I)
#   small:       2 rstd (4 B each), SDPA log-sum-exp (4 B per head)
def activation_bytes_per_token_layer(arch: Arch, b: int) -> int:
    h, i = arch.hidden_size, arch.intermediate_size
    norms = 2 * (4 * h + b * h) + 2 * 4
    attention = b * h + b * arch.q_dim + 2 * b * arch.kv_dim + b * arch.q_dim + 4 * arch.num_attention_heads
    mlp = b * h + 4 * b * i
    return norms + attention + mlp


# LoRA (model.lora): peft runs each adapted layer's input through the fp32 adapter, and
# autograd keeps that fp32 copy (for A's gradient) and A's output (r values, for B's), per
# adapted layer (checked with saved_tensors_hooks). The frozen layer itself then keeps
# nothing for a weight gradient; counting its input anyway keeps the estimate on the high side.
def lora_activation_bytes_per_token_layer(arch: Arch, rank: int, targets: list[str] | tuple[str, ...]) -> int:
    return sum(4 * i + 4 * rank for i, _ in arch.lora_shapes(targets))


def activation_bytes_per_token(arch: Arch, b: int, checkpointing: bool, lora_bytes: int = 0) -> int:
    """All layers' saved activations per token, plus the final norm and the lm_head's input;
    `lora_bytes`: what a LoRA adapter adds per token and layer.

    With gradient checkpointing each layer keeps only its input (b h) and one layer's
    activations are rebuilt at a time during backward.
    """
    layer = activation_bytes_per_token_layer(arch, b) + lora_bytes
    final = 4 * arch.hidden_size + 2 * b * arch.hidden_size + 4
    if checkpointing:
        return arch.num_hidden_layers * b * arch.hidden_size + layer + final
    return arch.num_hidden_layers * layer + final


def logits_bytes_per_element(b: int) -> int:
    """Live copies of the (tokens x vocabulary) logits at the peak of a microbatch.

    The lm_head's output (b), its fp32 upcast for the log-softmax (4, kept for
    logsumexp's backward; none when b is already 4), and one fp32 tensor of the same
    size: logsumexp's exp temporary in forward, the logits' gradient in backward.
    bf16: 2 + 4 + 4 = 10 bytes per element.
    """
    return b + (4 if b < 4 else 0) + 4


# Chunked (model.logprob_chunk_tokens, grpo/logprobs.py _ChunkedLabelLogProbs): one chunk of
# positions at a time, the fp32 logits and one fp32 temporary (logsumexp's exponentials or
# the probabilities, overwritten into the gradient), in forward and again in backward.
CHUNKED_LOGITS_BYTES_PER_ELEMENT = 8


# An entropy bonus backpropagates through the entropy (grpo/logprobs.py compute_entropy):
# autograd keeps the max-shifted fp32 logits and their softmax, two more fp32 copies.
ENTROPY_GRAPH_BYTES_PER_ELEMENT = 8
OVERHEAD = 1 * GiB  # CUDA context, cuBLAS workspaces, allocator slack; on CPU the runtime's libraries
SLEEP_RESIDUAL = 1 * GiB  # what a sleeping vLLM keeps on the GPU (outside its pool); check with mem/device_free


@dataclass
class Component:
    name: str
    bytes: int
    phases: tuple[str, ...]  # of PHASES
    how: str


PHASES = ("rollout", "backward", "optimizer")  # the optimizer step; the tracker's boundaries bear the same names
TRAIN_ONLY = ("backward", "optimizer")  # what training holds and a sleeping sampler does not need


@dataclass
class MemoryEstimate:
    components: list[Component]
    device: str
    dtype: str
    num_params: int
    microbatch: int
    seq_len: int
    notes: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> int:
        return next(c.bytes for c in self.components if c.name == name)

    def phase_bytes(self, phase: str) -> int:
        return sum(c.bytes for c in self.components if phase in c.phases)

    @property
    def total(self) -> int:
        """The peak: the largest of the phases."""
        return max(self.phase_bytes(p) for p in PHASES)

    def table(self) -> str:
        rows = [f"{'component':<24}{'size':>10}  {'rollout backward optimizer':<28}how"]
        for c in self.components:
            marks = "".join(f"{'x' if p in c.phases else '.':^{w}}" for p, w in zip(PHASES, (8, 9, 10), strict=True))
            rows.append(f"{c.name:<24}{format_bytes(c.bytes):>10}  {marks:<28}{c.how}")
        totals = ", ".join(f"{p} {format_bytes(self.phase_bytes(p))}" for p in PHASES)
        rows.append(f"{'peak':<24}{format_bytes(self.total):>10}  (phases: {totals})")
        head = (
            f"{format_count(self.num_params)} parameters in {self.dtype} on {self.device}; "
            f"microbatch {self.microbatch} x {self.seq_len} tokens"
        )
        return "\n".join([head, *rows, *self.notes])


def estimate_device(cfg: RunConfig) -> str:
    """The device a run of `cfg` would take here (runtime.device=auto asks torch)."""
    if cfg.runtime.device != "auto":
        return cfg.runtime.device
    import torch

    return resolve_device("auto", torch.cuda.is_available())


def estimate_prompt_tokens(cfg: RunConfig) -> int:
    """The longest prompt to plan for: the template plus a question allowance.

    tiny: one token per character, synthetic questions under 16 characters. Otherwise
    ~4 characters per token for the template's prose, and 256 tokens for the question:
    MATH500's 99th-percentile problem is ~750 characters of LaTeX (~3 characters/token).
    """
    from grpoctl.prompts import load_template

    try:
        template = load_template(cfg.prompt.template)
    except ValueError:
        template = "x" * 512
    if cfg.model.path == "tiny" or is_lab_path(cfg.model.path):
        return len(template) + 16
    return math.ceil(len(template) / 4) + 256


def estimate_peak_memory(
    arch: Arch,
    cfg: RunConfig,
    device_total_bytes: int | None = None,
    prompt_tokens: int | None = None,
) -> MemoryEstimate:
    """Peak memory of a GRPO step under `cfg`, component by component (see the table).

    The sequence length is the longest prompt plus rollout.max_tokens (a microbatch is
    padded to its longest row). Each precision of model.dtype is priced: pure bf16 keeps
    weights, gradients and AdamW's m and v in bf16 (8 B/param); bf16-mixed keeps all
    four in fp32 (16 B/param) and adds autocast's bf16 copy of the weights for the
    forward (2 B/param, held until backward), with bf16 activations and logits; float32
    is 16 B/param with fp32 activations. With LoRA (model.lora) the weights are frozen and
    the adapter alone, in fp32, has gradients and AdamW states; each adapted layer keeps
    an fp32 copy of its input for the adapter's backward. `device_total_bytes` sizes
    vLLM's gpu_memory_utilization share.
    """
    from grpoctl.config import derived_sizes

    device = estimate_device(cfg)
    dtype = resolve_dtype(cfg.model.dtype, device)
    mb = derived_sizes(cfg).microbatch_size
    seq = (prompt_tokens if prompt_tokens is not None else estimate_prompt_tokens(cfg)) + cfg.rollout.max_tokens
    c = _training_state(arch, cfg, dtype)
    c += _step_tensors(arch, cfg, dtype, mb, seq)
    sampler, notes = _sampler(arch, cfg, dtype, seq, device, device_total_bytes)
    c += sampler
    where = "CUDA context, workspaces, slack (assumed)" if device == "cuda" else "libraries (assumed)"
    c.append(Component("runtime overhead", OVERHEAD, PHASES, where))
    return MemoryEstimate(c, device, dtype, arch.num_params(), mb, seq, notes)


def _bytes_per_value(dtype: str) -> tuple[int, int]:
    """(w, b): bytes per stored weight, gradient and AdamW state; per activation, logit and vLLM weight."""
    w = 2 if weights_dtype(dtype) == "bfloat16" else 4
    b = 2 if compute_dtype(dtype) == "bfloat16" else 4
    return w, b


def _training_state(arch: Arch, cfg: RunConfig, dtype: str) -> list[Component]:
    """The weights, what the optimizer trains (every weight, or the LoRA adapter), their
    gradients, AdamW's states and temporaries, and autocast's weight copies."""
    w, b = _bytes_per_value(dtype)
    p = arch.num_params()
    # What the optimizer trains: every weight, or (LoRA) the adapter alone, kept in fp32
    # (train/lora.py) whatever the frozen weights' dtype: its gradients and AdamW states too.
    lora = cfg.model.lora
    trained, tw = (arch.lora_params(lora.rank, lora.targets), 4) if lora.enabled else (p, w)
    c = [Component("weights", p * w, PHASES, f"{format_count(p)} params x {w} B ({weights_dtype(dtype)})")]
    if lora.enabled:
        c.append(
            Component(
                "LoRA adapter",
                trained * tw,
                PHASES,
                f"{format_count(trained)} params (rank {lora.rank}, {', '.join(lora.targets)}) x 4 B (float32)",
            )
        )
        c.append(Component("gradients", trained * tw, TRAIN_ONLY, "the adapter's alone (4 B/param)"))
    else:
        c.append(Component("gradients", p * w, TRAIN_ONLY, f"same dtype as the weights ({w} B/param)"))
    if w != b:
        c.append(
            Component(
                "autocast weight copies", p * b, ("backward",), f"bf16 autocast's copy of each weight ({b} B/param)"
            )
        )

    if cfg.optimizer.name == "adamw8bit":
        # uint8 m and v, plus one fp32 absmax per 256-value block for each.
        per = 2 + 2 * 4 / 256
        c.append(
            Component(
                "optimizer states",
                int(trained * per),
                PHASES,
                f"8-bit AdamW: 2 x 1 B + block absmax = {per:.3f} B/param"
                + (" of the adapter" if lora.enabled else ""),
            )
        )
    else:
        whose = "the adapter's" if lora.enabled else "the params'"
        c.append(
            Component("optimizer states", trained * 2 * tw, PHASES, f"AdamW m, v in {whose} dtype: 2 x {tw} B/param")
        )
    if cfg.optimizer.name == "adamw":
        # torch's multi-tensor AdamW builds one state-sized temporary (sqrt of v) per step.
        c.append(
            Component(
                "optimizer temporaries", trained * tw, ("optimizer",), "AdamW foreach: sqrt(v), one state-sized copy"
            )
        )

    return c


def _step_tensors(arch: Arch, cfg: RunConfig, dtype: str, mb: int, seq: int) -> list[Component]:
    """A microbatch's activations (checkpointed or not, LoRA's input copies included), its
    logits (whole or chunked) and the entropy bonus's graph."""
    _, b = _bytes_per_value(dtype)
    lora = cfg.model.lora
    ckpt = bool(cfg.model.gradient_checkpointing)
    c: list[Component] = []
    lora_bytes = lora_activation_bytes_per_token_layer(arch, lora.rank, lora.targets) if lora.enabled else 0
    act = activation_bytes_per_token(arch, b, ckpt, lora_bytes) * mb * seq
    per_layer = activation_bytes_per_token_layer(arch, b) + lora_bytes
    how = (
        f"{mb} x {seq} tok x ({arch.num_hidden_layers} layer inputs x {b * arch.hidden_size} B + one layer"
        f" rebuilt, {per_layer / 1024:.0f} KiB)"
        if ckpt
        else f"{mb} x {seq} tok x {arch.num_hidden_layers} layers x {per_layer / 1024:.0f} KiB/tok/layer"
    )
    c.append(Component("activations" + (" (ckpt)" if ckpt else ""), act, ("backward",), how))
    chunk = cfg.model.logprob_chunk_tokens
    if chunk > 0:
        rows = min(chunk, mb * seq)
        per_el = CHUNKED_LOGITS_BYTES_PER_ELEMENT
        c.append(
            Component(
                "logits",
                rows * arch.vocab_size * per_el,
                ("backward",),
                f"chunks of {rows} tok (model.logprob_chunk_tokens) x {arch.vocab_size} vocab x {per_el} B "
                "(fp32 logits + one fp32 temporary)",
            )
        )
    else:
        per_el = logits_bytes_per_element(b)
        copies = "bf16 + fp32 upcast + fp32 grad" if b < 4 else "fp32 + fp32 grad"
        c.append(
            Component(
                "logits",
                mb * seq * arch.vocab_size * per_el,
                ("backward",),
                f"{mb} x {seq} x {arch.vocab_size} vocab x {per_el} B ({copies})",
            )
        )
    if cfg.loss.entropy_coef > 0 and chunk == 0:  # chunked, the bonus's graph is rebuilt per chunk too
        c.append(
            Component(
                "entropy bonus graph",
                mb * seq * arch.vocab_size * ENTROPY_GRAPH_BYTES_PER_ELEMENT,
                ("backward",),
                f"{mb} x {seq} x {arch.vocab_size} vocab x {ENTROPY_GRAPH_BYTES_PER_ELEMENT} B "
                "(fp32 shifted logits + softmax, kept for the bonus's backward)",
            )
        )

    return c


def _sampler(
    arch: Arch, cfg: RunConfig, dtype: str, seq: int, device: str, device_total_bytes: int | None
) -> tuple[list[Component], list[str]]:
    """What the rollouts hold: vLLM's pool (asleep or not) on a GPU, vLLM's own copy on CPU,
    or transformers generate's KV cache; and the notes the estimate adds."""
    w, b = _bytes_per_value(dtype)
    p = arch.num_params()
    on_gpu = device == "cuda"
    c: list[Component] = []
    notes = []
    backend = resolve_backend(cfg.rollout.backend, vllm_installed())
    v = cfg.rollout.vllm
    if backend == "vllm" and on_gpu:
        sleep = bool(v.sleep_mode)
        if device_total_bytes is None:
            notes.append("vLLM's share needs the device's memory: unknown here, counted as 0")
        pool = int(v.gpu_memory_utilization * (device_total_bytes or 0))
        util = f"gpu_memory_utilization {v.gpu_memory_utilization} x device"
        if sleep:
            c.append(Component("vLLM pool", pool, ("rollout",), f"{util}; asleep while training"))
            c.append(Component("vLLM asleep", SLEEP_RESIDUAL, TRAIN_ONLY, "what stays outside the pool (assumed)"))
            if v.sleep_level == 1:
                notes.append(f"sleep level 1 parks vLLM's weights in CPU RAM: {p * b / GiB:.2f} GiB of host memory")
        else:
            c.append(Component("vLLM pool", pool, PHASES, f"{util}; held throughout (sleep mode off)"))
    elif backend == "vllm":
        kv = int(v.cpu_kvcache_space_gb * GiB)
        c.append(
            Component(
                "vLLM weights + KV",
                p * b + kv,
                PHASES,
                f"its own weight copy + cpu_kvcache_space_gb {v.cpu_kvcache_space_gb}",
            )
        )
    else:
        batch = max(cfg.rollout.rollout_batch_size, cfg.eval.batch_size)
        # generate runs on the stored weights, outside autocast: its cache is in their dtype
        kv = batch * seq * arch.num_hidden_layers * 2 * arch.kv_dim * w
        c.append(
            Component(
                "generate KV cache", kv, ("rollout",), f"transformers generate: {batch} rows x {seq} tok x K and V"
            )
        )
    return c, notes


@dataclass
class KVCacheEstimate:
    """vLLM's KV cache for rollouts: what is left of its memory after its weights, and how
    many sequences of the longest prompt plus rollout.max_tokens it holds at once."""

    cache_bytes: int  # at most this much (GPU: vLLM also takes its profiled activation peak from its share)
    bytes_per_token: int  # K and V of every layer for one token
    seq_len: int  # prompt allowance + rollout.max_tokens
    rollouts: int  # rollout.rollout_batch_size
    where: str  # how cache_bytes was worked out

    @property
    def tokens(self) -> int:
        return max(self.cache_bytes, 0) // self.bytes_per_token

    @property
    def sequences(self) -> int:
        return self.tokens // self.seq_len

    def text(self) -> str:
        if self.sequences < 1:
            return (
                f"vLLM KV cache: {self.where}: no room for one sequence of {self.seq_len} tokens "
                "(raise rollout.vllm.gpu_memory_utilization, or cpu_kvcache_space_gb on CPU)"
            )
        waves = math.ceil(self.rollouts / self.sequences)
        batch = (
            f"all {self.rollouts} rollouts of a step at once"
            if waves == 1
            else f"a step's {self.rollouts} rollouts in {waves} waves"
        )
        return (
            f"vLLM KV cache: {self.where}\n"
            f"  {self.bytes_per_token / 1024:.1f} KiB per token (K and V of every layer): {self.tokens:,} tokens, "
            f"{self.sequences:,} sequences of {self.seq_len} tokens (prompt + rollout.max_tokens) at once,\n"
            f"  so {batch} (a group's shared prompt, cached once, leaves room for more)"
        )


def estimate_vllm_kv_cache(
    arch: Arch, cfg: RunConfig, device_total_bytes: int | None = None, prompt_tokens: int | None = None
) -> KVCacheEstimate | None:
    """The KV cache vLLM has for rollouts, for a run of `cfg` (None without the vLLM backend,
    or on a GPU whose memory is unknown).

    GPU: vLLM takes gpu_memory_utilization of the device, loads its weights (in the compute
    dtype) into it, takes its profiled activation peak, and makes the rest its KV cache: so
    the share less the weights is an upper bound (vLLM's start-up log gives the exact
    figure). CPU: the KV cache is rollout.vllm.cpu_kvcache_space_gb.
    """
    if resolve_backend(cfg.rollout.backend, vllm_installed()) != "vllm":
        return None
    device = estimate_device(cfg)
    b = 2 if compute_dtype(resolve_dtype(cfg.model.dtype, device)) == "bfloat16" else 4
    per_token = arch.num_hidden_layers * 2 * arch.kv_dim * b
    seq = (prompt_tokens if prompt_tokens is not None else estimate_prompt_tokens(cfg)) + cfg.rollout.max_tokens
    v = cfg.rollout.vllm
    if device == "cuda":
        if device_total_bytes is None:
            return None
        share = int(v.gpu_memory_utilization * device_total_bytes)
        weights = arch.num_params() * b
        where = (
            f"at most {format_bytes(share - weights)} left of its {format_bytes(share)} share "
            f"(gpu_memory_utilization {v.gpu_memory_utilization}) after its {format_bytes(weights)} of weights"
        )
        cache = share - weights
    else:
        cache = int(v.cpu_kvcache_space_gb * GiB)
        where = f"{format_bytes(cache)} on CPU (rollout.vllm.cpu_kvcache_space_gb)"
    return KVCacheEstimate(cache, per_token, seq, cfg.rollout.rollout_batch_size, where)


def visible_device_bytes(device: str) -> int | None:
    """The visible device's total memory (CUDA), the machine's RAM (CPU), None if unknown."""
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[1] if torch.cuda.is_available() else None
    import psutil

    return psutil.virtual_memory().total
