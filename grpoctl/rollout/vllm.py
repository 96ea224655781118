"""Rollouts from vLLM, colocated with the policy in the trainer's own process.

The engine is built from the same model directory as the policy and lives in this
process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so its worker, and the worker's model, are
reachable with plain Python calls: a weight sync is a copy from the policy's
parameters into vLLM's, with no serialization and no second process.

Three things the trainer relies on, each easy to get silently wrong:

- Token ids come back exactly as vLLM sampled them (prompt ids from the request
  output, completion ids as sampled). The response ends at the token that completes a
  stop string (vLLM drops whatever it sampled after it) or at EOS, both kept.
- After every weight sync the prefix cache is reset. Every r1_zero prompt shares a long
  prefix whose KV blocks vLLM caches across calls; they were computed with the old
  weights, and vLLM leaves invalidating them to the caller. Skipped, the engine would
  sample from a mixture of old and new policies with no error anywhere
  (tests/test_vllm_backend.py shows the log-prob mismatch).
- Sleep mode (CUDA only): `before_training()` frees vLLM's weights and KV cache so the
  backward pass can use that memory; `sync_weights()` wakes the weights, copies the
  policy in, resets the prefix cache and only then re-allocates the KV cache, so the
  two never have to fit at the same time as the trainer's cached blocks. Level 1 keeps
  a copy of the weights in host memory while asleep; level 2 drops them, which is safe
  here because the copy that follows every wake-up sends every parameter (vLLM 0.32 and
  0.33 save and restore the model's buffers, such as rotary caches and attention scales,
  across a level-2 sleep themselves). vLLM's pool stays in PyTorch's memory counts while
  asleep: `memory_pool_bytes` tells train/memory.py how much to leave out.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpoctl.rollout.base import Rollouts, SamplingSettings
from grpoctl.rollout.merged import serving_weights
from grpoctl.rules import compute_dtype, resolve_dtype

if TYPE_CHECKING:
    import torch
    from vllm import SamplingParams

    from grpoctl.config import Config

log = logging.getLogger("grpoctl")


def _in_process_engine() -> None:
    # Read by vLLM when the engine is built; with multiprocessing the worker (and the
    # model we copy weights into) would live in a child process out of reach.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # Read when vllm is first imported. Its INFO lines would drown the trainer's live
    # view; export VLLM_LOGGING_LEVEL=INFO to see them.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def vllm_available() -> tuple[bool, str]:
    """(True, its version: `0.32.0`) when vLLM imports here, else (False, why) in one line."""
    _in_process_engine()
    try:
        import vllm
    except Exception as exc:  # ImportError, but also broken CUDA/torch pairings
        first_line = (str(exc).splitlines() or [""])[0]
        return False, f"{type(exc).__name__}: {first_line}"
    return True, str(getattr(vllm, "__version__", "?"))


def _reload_in_worker(worker: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Runs inside vLLM's worker: copy `weights` ((name, tensor) pairs) into its model.

    `reload_weights` takes checkpoint-format names (the Hugging Face ones, which the
    policy's named_parameters are) and redoes the per-layer post-processing (fused
    qkv/gate_up layouts, CPU weight packing). A bare `model.load_weights` skips it, and
    fails on CPU, where loading packed the linear weights away into kernel buffers.
    """
    from vllm.config import set_current_vllm_config

    worker.reload_weights(weights_iterator=weights)
    model = worker.model_runner.get_model()
    lm_head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    tied = lm_head is not None and embed is not None and lm_head.weight is embed.weight
    if tied and lm_head is not None and hasattr(lm_head, "quant_method"):
        # With tied embeddings the checkpoint has no lm_head.weight, so the reload
        # processes only the embedding. On CPU the lm_head multiplies with a packed
        # copy of that weight made at load time, which would keep the OLD values:
        # repack it from the (updated, shared) weight. Elsewhere this is a no-op.
        with set_current_vllm_config(worker.vllm_config):
            lm_head.quant_method.process_weights_after_loading(lm_head)


def _repeat_rows(r: Rollouts, n: int) -> Rollouts:
    def rep(rows: list) -> list:
        return [list(row) if isinstance(row, list) else row for row in rows for _ in range(n)]

    return Rollouts(rep(r.prompt_ids), rep(r.response_ids), rep(r.response_texts), rep(r.truncated))


def _bind_cpu_threads(threads: int) -> None:
    """Honour runtime.threads on CPU: vLLM binds its OpenMP threads to cores itself (all of
    them by default) and then forbids torch.set_num_threads for the whole process, the
    policy's training included. An explicit VLLM_CPU_OMP_THREADS_BIND wins."""
    if threads <= 0 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return
    cores = sorted(os.sched_getaffinity(0))[:threads]
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
    log.info("vLLM on CPU: OpenMP threads bound to cores %s (runtime.threads=%d)", cores, threads)


def _fit_max_model_len(model_dir: str, wanted: int) -> int:
    """vLLM refuses a max_model_len beyond the model's positions (the tiny model has 1024)."""
    config = Path(model_dir) / "config.json"
    if config.is_file():
        limit = json.loads(config.read_text()).get("max_position_embeddings")
        if limit and wanted > limit:
            log.info("rollout.vllm.max_model_len %d exceeds the model's %d positions: using %d", wanted, limit, limit)
            return int(limit)
    return wanted


class VLLMRolloutBackend:
    name = "vllm"

    def __init__(self, model_dir: str, cfg: Config) -> None:
        _in_process_engine()
        import torch
        from vllm import LLM
        from vllm.platforms import current_platform

        v = cfg.rollout.vllm
        self.on_gpu = current_platform.is_cuda_alike()
        self.sleep_level = int(v.sleep_level)
        self.sleep_mode = bool(v.sleep_mode) and self.on_gpu
        if v.sleep_mode and not self.on_gpu:
            log.info("vLLM sleep mode is off: it needs CUDA, and this vLLM runs on %s", current_platform.device_type)
        if not self.on_gpu:
            _bind_cpu_threads(int(cfg.runtime.threads))
            # vLLM's CPU runner rewinds a per-request generator with set_offset when it
            # drops the token sampled for a partly prefilled prompt, which CPU
            # generators do not support: seeded requests crash once prompts are
            # chunked. On CPU sampling follows the engine's seed instead.
            log.info("vLLM on CPU: per-request seeds are off; sampling follows the engine seed (seed=%s)", cfg.seed)

        # The policy's compute dtype, so that synced weights mean the same numbers in both
        # (bf16-mixed: its fp32 master weights are rounded to bf16 as they are copied in).
        serving = compute_dtype(resolve_dtype(cfg.model.dtype, "cuda" if self.on_gpu else "cpu"))
        self.serving_dtype = getattr(torch, serving)  # what a LoRA merge is rounded to (rollout/merged.py)
        kwargs = dict(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=serving,
            seed=int(cfg.seed),
            enable_prefix_caching=bool(v.enable_prefix_caching),
            max_model_len=_fit_max_model_len(model_dir, int(v.max_model_len)),
            enforce_eager=bool(v.enforce_eager),
        )
        # TIS (loss.tis_cap) compares the trainer's log-probs with those of the distribution
        # each token was drawn from: after temperature and top-p ("processed"), not vLLM's
        # default raw ones. The mode is the engine's, so it is set once, here.
        if cfg.loss.tis_cap is not None:
            kwargs["logprobs_mode"] = "processed_logprobs"
        if self.on_gpu:
            kwargs.update(gpu_memory_utilization=float(v.gpu_memory_utilization), enable_sleep_mode=self.sleep_mode)
        else:
            # On CPU the KV cache is ordinary process memory: give it a fixed size
            # (the modern spelling of VLLM_CPU_KVCACHE_SPACE, which also takes
            # fractions of a GiB; an explicitly exported VLLM_CPU_KVCACHE_SPACE wins).
            kwargs.update(kv_cache_memory_bytes=int(float(v.cpu_kvcache_space_gb) * 2**30))

        # Every sync "fails" to load the tied LM head (it shares the embedding we did
        # send) and the rotary embedding (no weights): expected, so not worth a line per step.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(logging.ERROR)
        t0 = time.perf_counter()
        self.llm = LLM(**kwargs)
        self.start_seconds = time.perf_counter() - t0
        self._torch = torch
        self._sleeping = False

    # ------------------------------------------------------------------ generation

    def _sampling_params(self, n: int, sampling: SamplingSettings, seed: int | None, logprobs: bool) -> SamplingParams:
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            temperature=0.0 if sampling.greedy else sampling.temperature,
            top_p=1.0 if sampling.greedy else sampling.top_p,
            min_tokens=sampling.min_tokens,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop),
            include_stop_str_in_output=True,  # the reward reads the closing tag
            seed=seed,
            # 0 = the sampled token's own log-prob and no alternatives. vLLM's default
            # logprobs_mode is raw_logprobs (before temperature/top-p), i.e. the
            # policy's log-probs; at temperature 1, top_p 1 the two coincide anyway.
            # With TIS on, the engine reports processed ones (see __init__).
            logprobs=0 if logprobs else None,
        )

    def generate_with_logprobs(
        self, prompts: list[str], n: int, sampling: SamplingSettings, seed: int, logprobs: bool = True
    ) -> tuple[Rollouts, list[list[float]] | None]:
        """`generate`, plus vLLM's log-prob of each sampled response token (same shape as response_ids)."""
        if self._sleeping:
            raise RuntimeError("the vLLM engine is asleep since before_training(): call sync_weights(model) first")
        if sampling.greedy and n > 1:
            # vLLM refuses n > 1 with greedy decoding; the n copies would be identical anyway.
            one, lps = self.generate_with_logprobs(prompts, 1, sampling, seed, logprobs)
            return _repeat_rows(one, n), (None if lps is None else [row for row in lps for _ in range(n)])
        if self.on_gpu:
            # One seed per prompt; vLLM gives the n samples of a request seed, seed+1,
            # ..., seed+n-1, so prompt i starts at base + i*n and no two rows share one.
            base = (int(seed) * 1_000_003) % 2**31
            params = [self._sampling_params(n, sampling, base + i * n, logprobs) for i in range(len(prompts))]
        else:
            params = self._sampling_params(n, sampling, None, logprobs)
        outputs = self.llm.generate(list(prompts), params, use_tqdm=False)

        prompt_ids, response_ids, texts, truncated, lps = [], [], [], [], []
        for request in outputs:  # in prompt order
            for sample in sorted(request.outputs, key=lambda c: c.index):
                prompt_ids.append(list(request.prompt_token_ids))
                response_ids.append(list(sample.token_ids))
                texts.append(sample.text)
                truncated.append(sample.finish_reason == "length")
                if logprobs:
                    lps.append(
                        [step[token].logprob for step, token in zip(sample.logprobs, sample.token_ids, strict=True)]
                    )
        rollouts = Rollouts(prompt_ids, response_ids, texts, truncated)
        return rollouts, (lps if logprobs else None)

    def generate(self, prompts: list[str], n: int, sampling: SamplingSettings, seed: int) -> Rollouts:
        # Always with log-probs: TIS weighs by them, and without TIS (raw mode, before
        # temperature and top-p) they measure the gap to the trainer after a sync.
        rollouts, lps = self.generate_with_logprobs(prompts, n, sampling, seed, logprobs=True)
        rollouts.sampled_log_probs = lps
        return rollouts

    # ------------------------------------------------------------------ weights

    def push_weights(self, model: torch.nn.Module) -> None:
        """Copy the policy's parameters into vLLM's model, and nothing else.

        Callers want `sync_weights`, which also resets the prefix cache; this step is
        public so that the test can show what a sync without that reset serves.
        named_parameters() lists a tied lm_head once, as the embedding, which is what
        vLLM's loader expects (it skips lm_head.weight for tied models). A LoRA policy's
        adapter goes in merged, in fp32 and rounded once to vLLM's dtype (serving_weights).
        """
        with self._torch.no_grad():
            self.llm.collective_rpc(_reload_in_worker, args=(serving_weights(model, self.serving_dtype),))

    def reset_prefix_cache(self) -> None:
        if not self.llm.reset_prefix_cache():
            # vLLM refuses while requests are running; between steps none are.
            raise RuntimeError("vLLM refused to reset its prefix cache (requests still running?)")

    def sync_weights(self, model: torch.nn.Module) -> float:
        """Make the engine sample from `model`'s current weights; seconds spent."""
        t0 = time.perf_counter()
        if self._sleeping:
            # The trainer's freed blocks are still cached by PyTorch's allocator; hand
            # them back so vLLM's pool can map its weights (then its KV cache) again.
            self._torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
        self.push_weights(model)
        self.reset_prefix_cache()
        if self._sleeping:
            self.llm.wake_up(tags=["kv_cache"])
            self._sleeping = False
        if self.on_gpu:
            self._torch.cuda.synchronize()
        return time.perf_counter() - t0

    def before_training(self) -> None:
        """Sleep mode: offload (level 1) or drop (level 2) vLLM's weights, drop its KV cache."""
        if self.sleep_mode and not self._sleeping:
            self.llm.sleep(level=self.sleep_level)
            self._sleeping = True

    def memory_pool_bytes(self) -> int:
        """With sleep mode (CUDA), the bytes of vLLM's memory pool; else 0.

        Sleep mode allocates vLLM's weights and KV cache through a pluggable allocator, in a
        MemPool of PyTorch's caching allocator. Asleep, the pool's device memory is released
        (level 1 copies the weights to host memory first), but its tensors live on, so
        PyTorch's allocated and reserved counts keep them (vLLM issues #17117, #33625). The
        figure is the allocator's count of what it mapped: its segments, which the tensors
        in them fill but for rounding. It is the same awake or asleep, from the engine's start.
        """
        if not self.sleep_mode:
            return 0
        from vllm.device_allocator.cumem import CuMemAllocator

        return int(CuMemAllocator.get_instance().get_current_usage())

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        llm.llm_engine.engine_core.shutdown()
        self.llm = None
        del llm
        gc.collect()
        if self.on_gpu:
            self._torch.cuda.empty_cache()
