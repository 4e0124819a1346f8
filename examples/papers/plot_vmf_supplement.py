"""
The vMF supplement: formulas checked numerically
================================================

"Supplement - Nonparametric clustering with distance dependent hierarchies" (2014), Sec. 1,
gives the von Mises-Fisher (vMF) model with a known concentration ``kappa`` and a vMF prior on
the mean direction, which :class:`numpyro_hdphmm.emissions.VonMisesFisher` implements:

.. math::

    p(x \\mid \\mu, \\kappa) = C_d(\\kappa) \\exp(\\kappa \\mu^\\top x), \\qquad
    C_d(\\kappa) = \\frac{\\kappa^{d/2-1}}{(2\\pi)^{d/2} I_{d/2-1}(\\kappa)}
    \\qquad \\text{(eq. 1)}

    \\mu \\mid x_{1:N} \\sim \\mathrm{vMF}(R / \\lVert R \\rVert, \\lVert R \\rVert), \\qquad
    R = \\kappa_0 \\mu_0 + \\kappa \\textstyle\\sum_i x_i \\qquad \\text{(eqs. 4-7)}

    p(x_{1:N}) = C_d(\\kappa_0)\\, C_d(\\kappa)^N / C_d(\\lVert R \\rVert)
    \\qquad \\text{(Sec. 1.1.2)}

and, as the ratio of two marginals, the posterior predictive of the collapsed samplers
``p(x | x_{1:N}) = C_d(kappa) C_d(||R||) / C_d(||R + kappa x||)``.  The only numerical remark of
the supplement is that the Bessel function grows exponentially with ``kappa``; the package
evaluates everything in log space (:mod:`numpyro_hdphmm._core.special`: a power series and the
uniform asymptotic (Debye) expansion of ``log I_nu``).

This page checks each formula as implemented against an independent computation: SciPy's
exponentially scaled Bessel function ``ive``, SciPy's ``vonmises_fisher`` distribution, closed
forms, and numerical integration over the sphere.  Computations run in float64 (JAX's
``enable_x64``), and the float32 accuracy is shown where it matters.
"""

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from scipy import special as sp
from scipy import stats

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import special

# %%
# ``log I_nu(x)`` against SciPy
# -----------------------------
# Orders ``nu = d/2 - 1`` for dimensions ``d = 2 .. 101`` and arguments ``x`` from 1e-6 to 1e4.
# SciPy's reference is ``log(ive(nu, x)) + x``; where ``ive`` underflows (large ``nu``, small
# ``x``) the series' leading term is used instead.  The error is relative to
# ``max(1, |log I|)``.

dims = np.arange(2, 102)
xs = np.logspace(-6, 4, 400)
nu = (dims / 2 - 1)[:, None] * np.ones_like(xs)[None, :]
x = np.ones_like(dims)[:, None] * xs[None, :]
with np.errstate(divide="ignore"):
    reference = np.log(sp.ive(nu, x)) + x
small = ~np.isfinite(reference)
reference[small] = (nu * np.log(x / 2) - sp.gammaln(nu + 1))[small]  # I_nu(x) ~ (x/2)^nu / Gamma(nu+1)

with jax.enable_x64(True):
    ours64 = np.asarray(special.log_bessel_iv(jnp.asarray(nu), jnp.asarray(x)))
ours32 = np.asarray(special.log_bessel_iv(jnp.asarray(nu, jnp.float32), jnp.asarray(x, jnp.float32)))
scale = np.maximum(1.0, np.abs(reference))
err64 = np.abs(ours64 - reference) / scale
err32 = np.abs(ours32 - reference) / np.maximum(scale, nu)
print(f"float64: max relative error {err64.max():.1e};  float32 (relative to max(1, |log I|, nu)): {err32.max():.1e}")

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
for ax, err, title in [(axes[0], err64, "float64"), (axes[1], err32, "float32")]:
    im = ax.pcolormesh(xs, dims, np.log10(np.maximum(err, 1e-17)), shading="auto", cmap="magma", vmin=-17, vmax=-4)
    ax.set(xscale="log", xlabel="x", ylabel="d  (order d/2 - 1)", title=f"log10 error of log I, {title}")
fig.colorbar(im, ax=axes)

# %%
# The normalizer ``C_d(kappa)`` and the mean resultant length
# -----------------------------------------------------------
# Three independent checks of ``log C_d``: the SciPy expression of eq. 1; the closed form in
# three dimensions ``C_3(kappa) = kappa / (4 pi sinh kappa)``; and the ``kappa -> 0`` limit, the
# uniform density ``Gamma(d/2) / (2 pi^{d/2})`` (one over the area of the sphere).  And
# ``A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa)`` (``E[x] = A_d mu``) against SciPy's ratio.

kappas = np.logspace(-4, 3, 50)
with jax.enable_x64(True):
    for d in [2, 3, 10, 100]:
        ours = np.asarray(special.vmf_log_normalizer(d, jnp.asarray(kappas)))
        scipy_value = (d / 2 - 1) * np.log(kappas) - d / 2 * np.log(2 * np.pi) - (np.log(sp.ive(d / 2 - 1, kappas)) + kappas)
        A = np.asarray(special.vmf_mean_resultant_length(d, jnp.asarray(kappas)))
        A_scipy = sp.ive(d / 2, kappas) / sp.ive(d / 2 - 1, kappas)
        uniform = sp.gammaln(d / 2) - np.log(2) - d / 2 * np.log(np.pi)
        print(f"d = {d:3d}: max |log C_d - SciPy| {np.max(np.abs(ours - scipy_value)):.1e}, "
              f"max |A_d - SciPy| {np.max(np.abs(A - A_scipy)):.1e}, "
              f"log C_d(0) - log(1/area) = {float(special.vmf_log_normalizer(d, 0.0)) - uniform:.1e}")
    closed = np.log(kappas) - np.log(4 * np.pi) - (kappas + np.log1p(-np.exp(-2 * kappas)) - np.log(2))
    print(f"d = 3 closed form: max |log C_3 - log(kappa / (4 pi sinh kappa))| "
          f"{np.max(np.abs(np.asarray(special.vmf_log_normalizer(3, jnp.asarray(kappas))) - closed)):.1e}")

# %%
# The density against ``scipy.stats.vonmises_fisher``
# ---------------------------------------------------

rng = np.random.default_rng(0)
with jax.enable_x64(True):
    for d, kappa in [(3, 0.5), (3, 50.0), (10, 20.0), (50, 500.0)]:
        mu = rng.normal(size=d)
        mu /= np.linalg.norm(mu)
        pts = stats.vonmises_fisher(mu, kappa).rvs(200, random_state=rng)
        ours = np.asarray(nh.emissions.vmf.VonMisesFisherDistribution(jnp.asarray(mu), kappa).log_prob(jnp.asarray(pts)))
        print(f"d = {d:2d}, kappa = {kappa:6.1f}: max |log p - scipy logpdf| "
              f"{np.max(np.abs(ours - stats.vonmises_fisher(mu, kappa).logpdf(pts))):.1e}")

# %%
# The sampler: Wood's (1994) rejection sampler against SciPy's, through the distribution of
# ``mu^T x`` (which determines a vMF draw up to a uniform rotation about ``mu``).

fig, axes = plt.subplots(1, 3, figsize=(11, 3))
for ax, (d, kappa) in zip(axes, [(3, 2.0), (10, 20.0), (50, 100.0)]):
    mu = np.eye(d)[0]
    ours = np.asarray(nh.emissions.vmf.sample_von_mises_fisher(jax.random.key(d), jnp.asarray(mu, jnp.float32),
                                                                kappa, shape=(20000,)))
    ref = stats.vonmises_fisher(mu, kappa).rvs(20000, random_state=rng)
    ks = stats.ks_2samp(ours @ mu, ref @ mu)
    ax.hist(ref @ mu, bins=60, density=True, color="0.75", label="SciPy")
    ax.hist(ours @ mu, bins=60, density=True, histtype="step", color="C0", lw=1.5, label="ours")
    ax.set(title=f"d={d}, kappa={kappa:g}: KS p = {ks.pvalue:.2f}", xlabel="mu^T x")
    print(f"d = {d}, kappa = {kappa}: mean of mu^T x {np.mean(ours @ mu):.4f} (ours), "
          f"{np.mean(ref @ mu):.4f} (SciPy), A_d(kappa) = {float(special.vmf_mean_resultant_length(d, kappa)):.4f}")
axes[0].legend()
fig.tight_layout()

# %%
# Posterior, marginal likelihood and predictive (Sec. 1.1)
# --------------------------------------------------------
# On the circle (``d = 2``) every integral over the mean direction is one-dimensional:
# ``p(x_{1:N}) = int prior(mu) prod_i vMF(x_i | mu, kappa) dmu`` by quadrature over the angle of
# ``mu`` (Simpson's rule on 20001 points), and the posterior mean of ``mu`` likewise; on the
# sphere (``d = 3``) a two-dimensional grid over the angles.  They are compared with the family's
# ``log_marginal_likelihood``, ``posterior`` (whose mean is ``A_d(||R||) R / ||R||``) and
# ``log_predictive``.

from scipy.integrate import simpson  # noqa: E402


def vmf_logpdf(mus, x, kappa):
    """log vMF(x | mu, kappa) for every mean direction of the grid ``mus (..., d)``."""
    d = mus.shape[-1]
    return float(special.vmf_log_normalizer(d, kappa)) + kappa * (mus @ x)


def quadrature(family_kappa, kappa0, mu0, xs_data, d):
    """log p(x) and E[mu | x] by quadrature over the mean direction."""
    if d == 2:
        theta = np.linspace(0, 2 * np.pi, 20001)
        mus = np.stack([np.cos(theta), np.sin(theta)], -1)
        log_f = vmf_logpdf(mus, mu0, kappa0) + sum(vmf_logpdf(mus, x, family_kappa) for x in xs_data)
        m = log_f.max()
        w = np.exp(log_f - m)
        z = simpson(w, x=theta)
        mean = np.array([simpson(w * mus[:, j], x=theta) for j in range(2)]) / z
        return m + np.log(z), mean
    theta = np.linspace(0, np.pi, 1201)
    phi = np.linspace(0, 2 * np.pi, 2401)
    T, P = np.meshgrid(theta, phi, indexing="ij")
    mus = np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1)
    log_f = vmf_logpdf(mus, mu0, kappa0) + sum(vmf_logpdf(mus, x, family_kappa) for x in xs_data)
    m = log_f.max()
    w = np.exp(log_f - m) * np.sin(T)  # surface element sin(theta) dtheta dphi
    z = simpson(simpson(w, x=phi, axis=1), x=theta)
    mean = np.array([simpson(simpson(w * mus[..., j], x=phi, axis=1), x=theta) for j in range(3)]) / z
    return m + np.log(z), mean


with jax.enable_x64(True):
    for d, kappa, kappa0, n in [(2, 5.0, 1.0, 8), (2, 30.0, 0.01, 20), (3, 4.0, 2.0, 6), (3, 15.0, 0.5, 12)]:
        mu0 = np.eye(d)[-1]
        truth_mu = rng.normal(size=d)
        truth_mu /= np.linalg.norm(truth_mu)
        data = stats.vonmises_fisher(truth_mu, kappa).rvs(n + 1, random_state=rng)
        x_obs, x_new = data[:n], data[n]
        family = nh.emissions.VonMisesFisher(kappa, jnp.asarray(mu0), kappa0)
        stats_ = family.sufficient_statistics(jnp.asarray(x_obs), jnp.ones((n, 1)))
        post = family.posterior(stats_)
        post_mean = np.asarray(special.vmf_mean_resultant_length(d, post.prior_concentration[0])
                               * post.prior_mean[0])
        log_marg = float(family.log_marginal_likelihood(stats_)[0])
        log_pred = float(family.log_predictive(jnp.asarray(x_new), stats_)[0])
        q_marg, q_mean = quadrature(kappa, kappa0, mu0, x_obs, d)
        q_marg_new, _ = quadrature(kappa, kappa0, mu0, data, d)
        print(f"d={d} kappa={kappa:4.1f} kappa0={kappa0:4.2f} N={n:2d}: "
              f"log p(x) {log_marg:9.4f} (quadrature: difference {abs(log_marg - q_marg):.1e});  "
              f"E[mu|x]: difference {np.max(np.abs(post_mean - q_mean)):.1e};  "
              f"log p(x_new|x) {log_pred:8.4f} (difference {abs(log_pred - (q_marg_new - q_marg)):.1e})")

# %%
# All agree to the accuracy of the reference (``ive`` in double precision, the quadrature's
# grid).  The unit tests (``tests/core/test_special.py``, ``tests/emissions/test_vmf.py``) run
# the same comparisons on denser grids, with a negative control for each.
