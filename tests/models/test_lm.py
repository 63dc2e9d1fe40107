"""The language model: save/load round trip, generation with states, configs."""

import json

import pytest
import torch
import torch.nn.functional as F

from regmem.models import LM, LMConfig


def _lm(mixer="gla,attn", **kw):
    torch.manual_seed(0)
    return LM(LMConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, mixer=mixer, **kw)).eval()


def test_save_load_round_trip_gives_identical_logits(tmp_path):
    model = _lm(mixer_kwargs={"gla": {"expand_v": 2.0}})
    ids = torch.randint(0, 50, (2, 17))
    model.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"model.safetensors", "config.json", "manifest.json"}
    loaded = LM.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    assert torch.equal(loaded(ids), model(ids))
    assert loaded.head.weight.data_ptr() == loaded.embed.weight.data_ptr()  # ties survive the round trip


@pytest.mark.parametrize("mixer", ["attn", "linear", "retnet", "mamba2", "gla", "gla,attn"])
def test_greedy_generation_with_states_equals_recomputing_the_full_sequence(mixer):
    model = _lm(mixer)
    prompt = torch.randint(0, 50, (2, 9))
    out = model.generate(prompt, 8, temperature=0)
    expected = prompt
    with torch.no_grad():
        for _ in range(8):
            next_token = model(expected)[:, -1].argmax(-1, keepdim=True)
            expected = torch.cat([expected, next_token], dim=1)
    assert torch.equal(out, expected)


def test_left_padded_batch_generates_like_single_prompts():
    model = _lm("gla,attn")
    a, b = torch.randint(0, 50, (1, 9)), torch.randint(0, 50, (1, 5))
    batch = torch.cat([a, torch.cat([torch.zeros(1, 4, dtype=torch.long), b], dim=1)])
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :4] = False
    out = model.generate(batch, 6, temperature=0, attention_mask=mask)
    assert torch.equal(out[0:1], model.generate(a, 6, temperature=0))
    assert torch.equal(out[1:2, 4:], model.generate(b, 6, temperature=0))
    with pytest.raises(ValueError, match="left"):
        model.generate(batch, 1, attention_mask=mask.flip(1))


def test_sampling_is_reproducible_with_a_generator():
    model = _lm()
    prompt = torch.randint(0, 50, (3, 4))
    one = model.generate(prompt, 5, top_k=10, generator=torch.Generator().manual_seed(1))
    two = model.generate(prompt, 5, top_k=10, generator=torch.Generator().manual_seed(1))
    assert torch.equal(one, two)


def test_mixer_pattern_repeats_over_layers():
    config = LMConfig(vocab_size=10, n_layers=5, mixer="gla,gla,attn")
    assert config.layer_mixers() == ["gla", "gla", "attn", "gla", "gla"]
    assert LMConfig(vocab_size=10, n_layers=2, mixer=("attn", "retnet")).layer_mixers() == ["attn", "retnet"]


@pytest.mark.parametrize("bad", [{"mixer": "gru"}, {"mixer_kwargs": {"gru": {}}}, {"ffn": "mlp"}, {"d_model": 0}])
def test_invalid_config_raises(bad):
    with pytest.raises(ValueError):
        LMConfig(vocab_size=10, **bad)


def test_config_json_round_trip_rejects_unknown_keys():
    config = LMConfig(vocab_size=10, mixer=("attn", "gla"))
    assert LMConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="unknown"):
        LMConfig.from_dict({**config.to_dict(), "dropout": 0.1})


def test_state_floats_grow_only_for_attention():
    recurrent, attention = _lm("gla"), _lm("attn")
    assert recurrent.state_floats(100) == recurrent.state_floats(1000)
    assert attention.state_floats(1000) == 10 * attention.state_floats(100)



@pytest.mark.parametrize("mixer", ["titans_mlp", "recipe:uniform/mlp/sgd_weight_decay"])
def test_inside_an_lm_the_deep_memorys_weight_decay_starts_near_retention_one(mixer):
    """The LM zeroes every Linear bias after the mixers are built, so the decay gate's starting value (retention
    ~0.99 per token) lives in a parameter of its own; with the gate's bias reset, the retention would start at 0.5
    and wipe the meta-learned memory within a few tokens (Titans' MLP memory then trained at chance on MQAR)."""
    torch.manual_seed(0)
    layer = LM(LMConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4, mixer=mixer)).blocks[0].mixer
    logits = layer.gate_proj(torch.zeros(1, 1, 32)) + layer.gate_bias  # [1, 1, n_gates * H]
    log_retention = F.logsigmoid(-logits[..., -4:])  # the weight-decay gate of each head, as DeepMemoryMixer reads it
    assert torch.all(log_retention.exp() > 0.98)
