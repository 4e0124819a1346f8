"""The README's main example prints a relabelled summary with no NaN rows (issue 19)."""

import importlib.util
import pathlib

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "sticky_experiment_a.py"


@pytest.mark.slow  # compiles the example's T = 1000, L = 15 programs: minutes on 2 shared cores
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_example_prints_relabelled_summary_without_nan(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("sticky_experiment_a", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(num_warmup=10, num_samples=20, num_chains=2, prefix=str(tmp_path / "a"))
    out = capsys.readouterr().out
    assert "relabelled states holding" in out
    assert "effective (>= 1% of the steps)" in out and "point segmentation:" in out  # issue 41
    table = out[: out.index("state-indexed sites:")]
    assert "y_mu" in table and "kappa" in table
    assert "nan" not in table.lower() and "y_states" not in table
