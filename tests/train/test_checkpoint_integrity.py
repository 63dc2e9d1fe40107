"""Saved models and checkpoints are verified before anything is loaded from them (regmem/storage.py): a manifest
holds the sha256 and size of every file, so a flipped byte, a truncated file or another file in its place is refused
with a `CorruptFileError` (a ValueError naming the file) by the API and with one `regmem: error:` line by `generate`,
`levels` and `train --resume`, which then write nothing. Without a manifest (a directory saved before regmem wrote
them) a model still loads, with an `UnverifiedWarning`, and a file that is not safetensors or JSON is still named."""

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from regmem.lab.cli import main
from regmem.models import LM, LMConfig
from regmem.storage import MANIFEST_FILE, CorruptFileError, UnverifiedWarning
from regmem.train import latest_checkpoint
from regmem.train.checkpoint import verify_checkpoint


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_last_byte(path: Path) -> None:  # in the tensor data (safetensors puts the header first)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def flip_header_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF
    path.write_bytes(bytes(data))


def pickle_over(path: Path) -> None:
    path.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}))


CORRUPTIONS = {
    "truncated-weights": ("model.safetensors", truncate, "bytes, the manifest says"),
    "flipped-data-byte": ("model.safetensors", flip_last_byte, "checksum mismatch"),
    "flipped-header-byte": ("model.safetensors", flip_header_byte, "checksum mismatch"),
    "pickle-weights": ("model.safetensors", pickle_over, "bytes, the manifest says"),
    "pickle-config": ("config.json", pickle_over, "bytes, the manifest says"),
}
UNVERIFIED = {  # without a manifest the readers still name what is wrong
    "truncated-weights": ("model.safetensors", truncate, "not a readable safetensors file"),
    "pickle-weights": ("model.safetensors", pickle_over, "not a readable safetensors file"),
    "flipped-header-byte": ("model.safetensors", flip_header_byte, "not a readable safetensors file"),
    "pickle-config": ("config.json", pickle_over, "not a JSON file"),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "model"
    LM(LMConfig(vocab_size=256, d_model=16, n_heads=2, n_layers=1, mixer="gla")).save_pretrained(path)
    return path


def corrupted_copy(saved: Path, tmp_path: Path, name: str, corrupt, *, manifest: bool = True) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(saved, copy)
    if not manifest:
        (copy / MANIFEST_FILE).unlink()
    corrupt(copy / name)
    return copy


def test_a_saved_model_has_a_manifest_of_its_files_and_loads_exactly(saved):
    manifest = json.loads((saved / MANIFEST_FILE).read_text())
    assert set(manifest["files"]) == {"model.safetensors", "config.json"}
    model = LM.from_pretrained(saved)
    again = LM.from_pretrained(saved)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                  strict=True))


@pytest.mark.parametrize("case", CORRUPTIONS)
def test_a_corrupted_model_is_refused_naming_the_file(saved, tmp_path, case):
    name, corrupt, message = CORRUPTIONS[case]
    copy = corrupted_copy(saved, tmp_path, name, corrupt)
    with pytest.raises(CorruptFileError, match=f"^{copy / name}: .*{message}"):
        LM.from_pretrained(copy)


@pytest.mark.parametrize("case", UNVERIFIED)
def test_without_a_manifest_a_model_loads_with_a_warning_and_an_unreadable_file_is_named(saved, tmp_path, case):
    name, corrupt, message = UNVERIFIED[case]
    copy = corrupted_copy(saved, tmp_path, name, corrupt, manifest=False)
    with pytest.warns(UnverifiedWarning), pytest.raises(CorruptFileError, match=f"^{copy / name}: {message}"):
        LM.from_pretrained(copy)


def test_a_model_without_a_manifest_loads_with_a_warning(saved, tmp_path):
    copy = corrupted_copy(saved, tmp_path, MANIFEST_FILE, Path.unlink)
    with pytest.warns(UnverifiedWarning, match="has no manifest.json"):
        LM.from_pretrained(copy)


@pytest.mark.parametrize("case", CORRUPTIONS)
@pytest.mark.parametrize("command", ["generate", "levels"])
def test_generate_and_levels_refuse_a_corrupted_model_with_one_line(saved, tmp_path, capsys, case, command):
    name, corrupt, message = CORRUPTIONS[case]
    copy = corrupted_copy(saved, tmp_path, name, corrupt)
    argv = ["generate", str(copy), "--prompt", "Hi"] if command == "generate" else ["levels", "--model", str(copy)]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and "Traceback" not in captured.err and captured.out == ""
    flag = "model_dir" if command == "generate" else "--model"
    assert captured.err.strip().splitlines()[-1].startswith(f"regmem: error: argument {flag}: {copy / name}: ")
    assert message in captured.err


TRAIN = ["train", "mqar", "--mixer", "gla", "--preset", "tiny", "--steps", "4", "--no-progress",
         "--checkpoint-every", "2"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "run"
    main([*TRAIN, "--out-dir", str(path)])
    return path


def test_a_checkpoint_has_a_manifest_and_verifies(run_dir):
    checkpoint = latest_checkpoint(run_dir)
    assert set(json.loads((checkpoint / MANIFEST_FILE).read_text())["files"]) == {
        "model.safetensors", "optimizer.safetensors", "trainer.json"}
    verify_checkpoint(checkpoint)


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "trainer.json"])
@pytest.mark.parametrize("corrupt", [flip_last_byte, truncate], ids=["flipped", "truncated"])
def test_resume_refuses_a_corrupted_checkpoint_and_keeps_the_model(run_dir, tmp_path, capsys, name, corrupt):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    corrupt(copy / "checkpoint" / name)
    model = (copy / "model" / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit) as exit_:
        main([*TRAIN, "--out-dir", str(copy), "--resume"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and "Traceback" not in captured.err
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith(f"regmem: error: argument --resume: {copy / 'checkpoint' / name}: "), last
    assert (copy / "model" / "model.safetensors").read_bytes() == model  # the good model is not overwritten
