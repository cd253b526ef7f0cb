"""The vendor-facing command line: export-c with golden vectors, --profile, --kernel-library."""

import json
import subprocess

import pytest

from byoc_int8 import cli


def test_export_c_writes_a_project_and_layer_vectors_that_check(tmp_path, capsys):
    out, vectors = tmp_path / "model_c", tmp_path / "vectors"
    assert cli.main(["export-c", "--model", "digits", "-o", str(out), "--vectors", str(vectors), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "MODEL_WORKSPACE_BYTES" in printed and "golden vectors" in printed
    manifest = json.loads((vectors / "manifest.json").read_text())
    subprocess.run(["gcc", "-std=c99", "-O2", *map(str, sorted(out.glob("*.c"))), "-lm", "-o", str(out / "t")], check=True)
    assert "passed: 2 vectors" in subprocess.run([str(out / "t")], capture_output=True, text=True, check=True).stdout
    layers = subprocess.run([str(out / "t"), "--layers", str(vectors)], capture_output=True, text=True, check=True).stdout
    assert f"layers: {len(manifest['calls'])} of {len(manifest['calls'])} checked, all equal" in layers


@pytest.mark.parametrize("argv, message", [
    (["run", "--model", "digits", "--profile", "npu9"], "--profile: unknown profile 'npu9'"),
    (["compile", "--model", "digits", "-o", "x.so", "--kernel-library", "/no/libk.so"], "--kernel-library /no/libk.so: no such file"),
])
def test_vendor_option_mistakes_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("byoc-int8: error: ") and message in err[0]


def test_profile_refusals_are_listed_with_their_key(capsys):
    assert cli.main(["run", "--model", "digits", "--profile", "pow2-npu", "--int8-only", "--quiet"]) == 2
    assert "profile pow2-npu: ops has no 'global_avg_pool2d'" in capsys.readouterr().err


def test_export_c_refuses_a_model_with_host_ops(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["export-c", "--model", "digits", "--profile", "pow2-npu", "-o", str(tmp_path / "c"), "--quiet"])
    assert exit_.value.code == 2
    assert "export-c needs every op in int8; 1 run on the host" in capsys.readouterr().err
