"""regmem's LM behind transformers' Auto classes (regmem/hf.py): saved and loaded by `save_pretrained` /
`AutoModelForCausalLM.from_pretrained` to the same outputs, `generate` carrying the LM's recurrent state (one token a
step after the prompt), left padding, and the labels' loss. A tiny model, nothing downloaded."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from regmem.hf import RegmemForCausalLM, from_regmem
from regmem.models import LM, LMConfig


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    lm = LM(LMConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, mixer="retnet,attn")).eval()
    directory = tmp_path_factory.mktemp("hf")
    from_regmem(lm).save_pretrained(directory)
    return lm, directory


def _greedy(lm, ids, steps):
    for _ in range(steps):
        ids = torch.cat([ids, lm(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    return ids


def test_auto_classes_load_the_same_model(saved):
    lm, directory = saved
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    assert isinstance(model, RegmemForCausalLM) and model.lm.config == lm.config
    x = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(x).logits, lm(x))  # the unsaved buffers (rotary, RetNet's decays) restored


def test_generate_carries_the_recurrent_state_one_token_a_step(saved, monkeypatch):
    lm, directory = saved
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    lengths, forward = [], model.lm.forward

    def recording(ids, *args, **kwargs):
        lengths.append(ids.shape[1])
        return forward(ids, *args, **kwargs)

    monkeypatch.setattr(model.lm, "forward", recording)
    x = torch.randint(0, 32, (2, 7), generator=torch.Generator().manual_seed(2))
    out = model.generate(x, max_new_tokens=5, do_sample=False)
    assert lengths == [7, 1, 1, 1, 1]  # the prompt, then the newest token with the state
    with torch.no_grad():
        assert torch.equal(out, _greedy(lm, x, 5))


def test_left_padded_generation_equals_the_unpadded_one(saved):
    lm, directory = saved
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    prompt = torch.randint(1, 32, (1, 5), generator=torch.Generator().manual_seed(3))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], 1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 5, dtype=torch.long)], 1)
    out = model.generate(padded, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    alone = model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(out[:, 3:], alone)


def test_labels_give_the_next_token_loss(saved):
    lm, directory = saved
    model = AutoModelForCausalLM.from_pretrained(directory)
    x = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(4))
    out = model(x, labels=x)
    expected = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()  # trainable through transformers' interface
    assert model.lm.embed.weight.grad is not None
