"""regmem's language model as a Hugging Face `transformers` model (the optional extra `regmem[hf]`).

Importing this module registers `RegmemConfig` (model_type "regmem") and `RegmemForCausalLM` with the Auto classes,
so that `AutoModelForCausalLM.from_pretrained(<dir>)`, `save_pretrained` and `generate` work, and so can tools that
load causal LMs through them (lm-evaluation-harness's `hf` model, after `import regmem.hf`). The wrapped model is
`regmem.models.LM` unchanged; its config travels whole as `lm_config` (`LMConfig.to_dict`).

The cache `generate` carries is the model's own recurrent state (a list of per-layer states: memory matrices, conv
and KV caches), passed as `past_key_values`: after the prompt, each step feeds the newest token only, as
`LM.generate` does. `transformers` never builds a cache of its own for it (`_supports_default_dynamic_cache` is
False), and nothing is downloaded. Greedy decoding and sampling are supported; beam search (`num_beams > 1`) is
not: it would reorder the state's rows between beams, which this wrapper does not do.

    >>> import tempfile
    >>> from regmem.models import LM, LMConfig
    >>> lm = LM(LMConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, mixer="gla"))
    >>> directory = tempfile.mkdtemp()
    >>> from_regmem(lm).save_pretrained(directory)
    >>> from transformers import AutoModelForCausalLM
    >>> type(AutoModelForCausalLM.from_pretrained(directory)).__name__
    'RegmemForCausalLM'
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutputWithPast
except ImportError as error:  # the module is optional: say what to install
    raise ImportError("regmem.hf needs Hugging Face transformers: pip install 'regmem[hf]'") from error

from regmem.models import LM, LMConfig

MODEL_TYPE = "regmem"
# the output's cache field: `cache` from transformers 5, `past_key_values` before it
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class RegmemConfig(PretrainedConfig):
    """The regmem LM's config (`lm_config`: `LMConfig.to_dict()`) inside a `PretrainedConfig`."""

    model_type = MODEL_TYPE

    def __init__(self, lm_config: dict | None = None, **kwargs):
        self.lm_config = dict(lm_config or {})
        if self.lm_config:
            self.vocab_size = self.lm_config["vocab_size"]  # what generation's processors read
        # the LM's own tying: its head shares the embedding unless tie_embeddings is False
        kwargs.setdefault("tie_word_embeddings", bool(self.lm_config.get("tie_embeddings", True)))
        super().__init__(**kwargs)


class RegmemForCausalLM(PreTrainedModel, GenerationMixin):
    """`regmem.models.LM` behind `transformers`' causal-LM interface (module docstring)."""

    config_class = RegmemConfig
    base_model_prefix = "lm"
    _tied_weights_keys = {"lm.head.weight": "lm.embed.weight"}  # with tie_word_embeddings
    main_input_name = "input_ids"

    def __init__(self, config: RegmemConfig):
        super().__init__(config)
        self.lm = LM(LMConfig.from_dict(config.lm_config))
        self.post_init()

    def _init_weights(self, module):
        """Only the buffers a checkpoint does not hold (rotary frequencies, RetNet's decays): the LM initialises its
        own weights (GPT-2's), and loading overwrites them."""
        if hasattr(module, "reset_buffers"):
            module.reset_buffers()

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """transformers' loading, then every module's unsaved buffers recomputed (it builds them on the meta
        device, and may not initialise a module whose weights all loaded)."""
        model = super().from_pretrained(*args, **kwargs)
        for module in model.modules():
            if hasattr(module, "reset_buffers"):
                module.reset_buffers()
        return model

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the cache is the LM's recurrent state, not a key-value cache

    def get_input_embeddings(self):
        return self.lm.embed

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, cache=None,
                use_cache: bool | None = None, labels: torch.Tensor | None = None, past_key_values=None,
                **kwargs) -> CausalLMOutputWithPast:
        """logits [B, T, V]; with `use_cache`, the state after these tokens as the output's cache (`cache` in
        transformers 5, `past_key_values` before; either is read back); with `labels` ([B, T], -100 ignored), the
        mean next-token cross-entropy (labels shifted inside, as transformers' LMs do)."""
        state = cache if cache is not None else past_key_values
        logits, state = self.lm(input_ids, state, attention_mask=attention_mask, return_state=True)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE_FIELD: state if use_cache else None})

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs) -> dict:
        """The whole prompt first; then, with the state, only the newest token (and its mask column)."""
        state = kwargs.get("cache", kwargs.get("past_key_values"))
        if state is not None:
            input_ids = input_ids[:, -1:]
            attention_mask = attention_mask[:, -1:] if attention_mask is not None else None
        return {"input_ids": input_ids, CACHE_FIELD: state, "attention_mask": attention_mask, "use_cache": True}


def from_regmem(lm: LM) -> RegmemForCausalLM:
    """A `RegmemForCausalLM` holding `lm`'s weights (copied)."""
    model = RegmemForCausalLM(RegmemConfig(lm_config=lm.config.to_dict()))
    model.lm.load_state_dict(lm.state_dict())
    return model


AutoConfig.register(MODEL_TYPE, RegmemConfig, exist_ok=True)
AutoModelForCausalLM.register(RegmemConfig, RegmemForCausalLM, exist_ok=True)
