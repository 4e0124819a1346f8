"""Kalman filter / RTS smoother / FFBS sampler against the dense joint Gaussian."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_hdphmm._core.kalman import (
    KalmanFiltered,
    backward_sample,
    kalman_filter,
    kalman_sample,
    kalman_smoother,
)

T, D, P = 5, 2, 3


def _random_spd(rng, n, scale):
    M = rng.normal(size=(n, n))
    return scale * (M @ M.T / n + 0.5 * np.eye(n))


def _random_lds(seed=0):
    rng = np.random.default_rng(seed)
    A = np.stack([0.8 * np.eye(D) + 0.2 * rng.normal(size=(D, D)) for _ in range(T)])
    b = rng.normal(size=(T, D))
    Q = np.stack([_random_spd(rng, D, 0.5 + 0.2 * t) for t in range(T)])
    C = rng.normal(size=(P, D))
    d = rng.normal(size=P)
    R = _random_spd(rng, P, 0.4)  # full (correlated) observation noise
    x_init = np.array([1.5, -0.7])
    y = rng.normal(size=(T, P)) * 2.0
    return dict(x_init=x_init, A=A, b=b, Q=Q, C=C, d=d, R=R, y=y)


def _dense_joint(m):
    """Mean and covariance of the stacked (x_{0:T-1}, y_{0:T-1}) (x first, time-major)."""
    A, b, Q, C, d, R = m["A"], m["b"], m["Q"], m["C"], m["d"], m["R"]
    mu_x = np.zeros((T, D))
    prev = m["x_init"]
    for t in range(T):
        prev = A[t] @ prev + b[t]
        mu_x[t] = prev
    # x = mu_x + M e,  M[t, s] = A_t ... A_{s+1}  (s <= t)
    M = np.zeros((T * D, T * D))
    for t in range(T):
        blk = np.eye(D)
        for s in range(t, -1, -1):
            M[t * D:(t + 1) * D, s * D:(s + 1) * D] = blk
            blk = blk @ A[s]
    Qbig = np.zeros((T * D, T * D))
    for t in range(T):
        Qbig[t * D:(t + 1) * D, t * D:(t + 1) * D] = Q[t]
    Sxx = M @ Qbig @ M.T
    Cbig = np.kron(np.eye(T), C)
    Syy = Cbig @ Sxx @ Cbig.T + np.kron(np.eye(T), R)
    Sxy = Sxx @ Cbig.T
    mu_y = (mu_x @ C.T + d).ravel()
    return mu_x.ravel(), mu_y, Sxx, Sxy, Syy


def _condition(m, observed):
    """Dense posterior of x (flattened) given y entries at `observed` (flattened bool (T*P,)),
    and the log marginal density of those entries."""
    mu_x, mu_y, Sxx, Sxy, Syy = _dense_joint(m)
    idx = np.flatnonzero(observed)
    yv = m["y"].ravel()[idx]
    if idx.size == 0:
        return mu_x, Sxx, 0.0
    Soo = Syy[np.ix_(idx, idx)]
    G = np.linalg.solve(Soo, Sxy[:, idx].T).T
    r = yv - mu_y[idx]
    mean = mu_x + G @ r
    cov = Sxx - G @ Sxy[:, idx].T
    _, logdet = np.linalg.slogdet(Soo)
    ll = -0.5 * (r @ np.linalg.solve(Soo, r) + logdet + idx.size * np.log(2 * np.pi))
    return mean, cov, ll


def _case(name, diagonal=False):
    """A model, mask and length; ``diagonal``: ``R`` replaced by its diagonal (the dense joint then
    uses ``diag(r)``; :func:`_args` passes the variances ``r`` (P,), the filter's diagonal form)."""
    m = _random_lds(0)
    if diagonal:
        m["R"] = np.diag(np.diag(m["R"]))
        m["diagonal"] = True
    mask = np.ones((T, P), bool)
    if name == "full":
        length = T
    elif name == "missing":
        mask[1] = False  # fully missing step
        mask[3, 1] = False  # one dim missing alone
        mask[4, [0, 2]] = False  # two dims missing
        length = T
    elif name == "short":
        mask[0, 2] = False
        length = 3
    y = m["y"].copy()
    y[~mask] = np.nan  # never reaches arithmetic
    m["y"] = y
    return m, mask, length


def _observed(mask, length, upto=None):
    obs = mask & (np.arange(T)[:, None] < length)
    if upto is not None:
        obs = obs & (np.arange(T)[:, None] <= upto)
    return obs.ravel()


def _args(m, mask, length):
    R = np.diag(m["R"]) if m.get("diagonal") else m["R"]
    return (m["x_init"], m["A"], m["b"], m["Q"], m["C"], m["d"], R, m["y"], mask, length)


CASES = [(name, diagonal) for diagonal in (False, True) for name in ("full", "missing", "short")]


_filter = jax.jit(kalman_filter)
_smoother = jax.jit(kalman_smoother)


@pytest.mark.parametrize("name,diagonal", CASES)
def test_filter_smoother_match_dense(name, diagonal):
    m, mask, length = _case(name, diagonal)
    f = _filter(*_args(m, mask, length))
    assert isinstance(f, KalmanFiltered)
    assert f.means.shape == (T, D) and f.covs.shape == (T, D, D)
    assert f.predicted_means.shape == (T, D) and f.predicted_covs.shape == (T, D, D)

    # (a) log-likelihood of the observed entries
    mean, cov, ll = _condition(m, _observed(mask, length))
    np.testing.assert_allclose(float(f.log_likelihood), ll, rtol=1e-8)

    # (b) smoother = dense posterior marginals
    sm, sc = _smoother(f, m["A"], m["b"], m["Q"])
    for t in range(T):
        sl = slice(t * D, (t + 1) * D)
        np.testing.assert_allclose(sm[t], mean[sl], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(sc[t], cov[sl, sl], rtol=1e-8, atol=1e-10)

    # (c) filter: every step t (in particular length - 1) = posterior given y_{0:t};
    # predictions = posterior of x_t given y_{0:t-1}
    for t in range(T):
        sl = slice(t * D, (t + 1) * D)
        fm, fc, _ = _condition(m, _observed(mask, length, upto=t))
        np.testing.assert_allclose(f.means[t], fm[sl], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(f.covs[t], fc[sl, sl], rtol=1e-8, atol=1e-10)
        pm, pc, _ = _condition(m, _observed(mask, length, upto=t - 1))
        np.testing.assert_allclose(f.predicted_means[t], pm[sl], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(f.predicted_covs[t], pc[sl, sl], rtol=1e-8, atol=1e-10)


def _moment_check(draws, mean, cov, z_max=5.5):
    """Monte Carlo check of draws (n, k) against N(mean, cov).

    Mean: z = (xbar - mu) / sqrt(Sigma_ii / n).  Covariance: z = (S_ij - Sigma_ij) / se_ij with
    the Gaussian standard error se_ij = sqrt((Sigma_ii Sigma_jj + Sigma_ij^2) / n).  With a fixed
    seed and k(k+3)/2 = 65 statistics, |z| > 5.5 has probability ~3e-6 under the null.
    Returns (passed, max |z| of the means, max |z| of the covariances)."""
    n = draws.shape[0]
    zm = np.abs(draws.mean(0) - mean) / np.sqrt(np.diag(cov) / n)
    S = np.cov(draws, rowvar=False)
    v = np.diag(cov)
    se = np.sqrt((np.outer(v, v) + cov**2) / n)
    zc = np.abs(S - cov) / se
    return bool(zm.max() < z_max and zc.max() < z_max), zm.max(), zc.max()


@pytest.mark.parametrize("name,diagonal", [("missing", False), ("short", False), ("missing", True)])
def test_backward_sample_matches_dense_posterior(name, diagonal):
    m, mask, length = _case(name, diagonal)
    mean, cov, _ = _condition(m, _observed(mask, length))
    f = _filter(*_args(m, mask, length))
    n = 20000
    keys = jax.random.split(jax.random.PRNGKey(1), n)
    draws = jax.jit(jax.vmap(backward_sample, in_axes=(0, None, None, None, None)))(
        keys, f, m["A"], m["b"], m["Q"])
    assert draws.shape == (n, T, D)
    ok, zm, zc = _moment_check(np.asarray(draws).reshape(n, -1), mean, cov)
    assert ok, (zm, zc)

    # kalman_sample = filter + backward_sample with the same key
    x, ll = jax.jit(kalman_sample)(keys[0], *_args(m, mask, length))
    np.testing.assert_allclose(x, draws[0], rtol=1e-10)
    np.testing.assert_allclose(ll, f.log_likelihood, rtol=1e-12)

    # (e) negative control: independent draws from the filtered marginals (no backward
    # conditioning) must be rejected by the same check.
    def broken(key):
        e = jax.random.normal(key, (T, D))
        return f.means + jnp.einsum("tij,tj->ti", jnp.linalg.cholesky(f.covs), e)

    bad = jax.jit(jax.vmap(broken))(keys)
    ok_bad, zm_bad, zc_bad = _moment_check(np.asarray(bad).reshape(n, -1), mean, cov)
    assert not ok_bad
    assert max(zm_bad, zc_bad) > 20.0, (zm_bad, zc_bad)


def test_vmap_over_sequences():
    ms = [_case(nm) for nm in ("full", "missing", "short")]
    stack = lambda k: np.stack([mm[k] for mm, _, _ in ms])  # noqa: E731
    masks = np.stack([mk for _, mk, _ in ms])
    lengths = np.array([ln for _, _, ln in ms])
    args = (stack("x_init"), stack("A"), stack("b"), stack("Q"), stack("C"), stack("d"),
            stack("R"), stack("y"), masks, lengths)
    fb = jax.jit(jax.vmap(kalman_filter))(*args)
    assert fb.means.shape == (3, T, D) and fb.covs.shape == (3, T, D, D)
    assert fb.log_likelihood.shape == (3,)
    for i, (mm, mk, ln) in enumerate(ms):
        np.testing.assert_allclose(fb.log_likelihood[i],
                                   _filter(*_args(mm, mk, ln)).log_likelihood, rtol=1e-12)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    x, ll = jax.jit(jax.vmap(kalman_sample))(keys, *args)
    assert x.shape == (3, T, D) and ll.shape == (3,)
    assert np.all(np.isfinite(x))
    sm, sc = jax.vmap(kalman_smoother)(fb, args[1], args[2], args[3])
    assert sm.shape == (3, T, D) and sc.shape == (3, T, D, D)


def test_diagonal_form_equals_full_form():
    """The information-form update (``R`` as variances) and the Joseph form (``R`` as the diagonal
    matrix) give the same filter, to float64 rounding, on every case."""
    for name in ("full", "missing", "short"):
        m, mask, length = _case(name, diagonal=True)
        info = _filter(*_args(m, mask, length))
        joseph = _filter(*_args({**m, "diagonal": False}, mask, length))
        for a, b in zip(info, joseph):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("diagonal", [False, True])
def test_float32_stiff_long_series(diagonal):
    rng = np.random.default_rng(3)
    Tl, Dl, Pl = 2000, 2, 2
    A = np.broadcast_to(0.999 * np.eye(Dl), (Tl, Dl, Dl))
    b = np.zeros((Tl, Dl))
    Q = np.broadcast_to(1e-4 * np.eye(Dl), (Tl, Dl, Dl))
    C = np.array([[1.0, 0.3], [-0.2, 0.8]])
    d = np.array([0.1, -0.2])
    R = 1e-2 * (np.ones(Pl) if diagonal else np.eye(Pl))
    x = np.zeros((Tl, Dl))
    prev = np.array([0.5, -0.5])
    for t in range(Tl):
        prev = A[t] @ prev + rng.normal(size=Dl) * 1e-2
        x[t] = prev
    y = x @ C.T + d + rng.normal(size=(Tl, Pl)) * 0.1
    mask = rng.uniform(size=(Tl, Pl)) > 0.1
    y[~mask] = np.nan
    args = [np.array([0.5, -0.5]), A, b, Q, C, d, R, y, mask, Tl]

    f64 = _filter(*args)
    args32 = [np.asarray(a, np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
              else a for a in args]
    f32 = _filter(*args32)
    assert f32.means.dtype == jnp.float32 and f32.covs.dtype == jnp.float32
    assert f32.log_likelihood.dtype == jnp.float32
    for covs in (f32.covs, f32.predicted_covs):
        covs = np.asarray(covs)
        np.testing.assert_array_equal(covs, np.swapaxes(covs, -1, -2))
        chol = np.asarray(jnp.linalg.cholesky(jnp.asarray(covs)))
        assert np.all(np.isfinite(chol))
        assert np.all(np.linalg.eigvalsh(covs.astype(np.float64)) > 0)
    assert np.isfinite(float(f32.log_likelihood))
    np.testing.assert_allclose(float(f32.log_likelihood), float(f64.log_likelihood), rtol=1e-3)
    np.testing.assert_allclose(f32.means, f64.means, atol=1e-3)
    # the sampler stays finite in float32 too
    x32 = jax.jit(backward_sample)(jax.random.PRNGKey(0), f32, *args32[1:4])
    assert x32.dtype == jnp.float32 and np.all(np.isfinite(x32))
