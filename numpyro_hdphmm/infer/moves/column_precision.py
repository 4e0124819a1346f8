r"""Automatic relevance determination (ARD) of autoregressive dynamics: the exact update of the
column precisions (Fox, Sudderth, Jordan & Willsky 2011, "Bayesian Nonparametric Inference of
Switching Dynamic Linear Models", IEEE TSP 59(4), Sec. IV-A).

The model writes a precision per column of ``A_k (D, m)`` as its own Gamma site
(``docs/slds.md``, "Your own priors: Fox et al.'s ARD")::

    lambda_j ~ Gamma(a_j, b_j)  (rate b_j),  j = 1..m      (or one lambda for every column)
    Sigma_k ~ IW(df, scale),  A_k | Sigma_k ~ MN(loc, Sigma_k, diag(lambda)^{-1}),  k = 1..K

Discovery recognizes the site
(:attr:`~numpyro_hdphmm.infer.plumbing.discovery.HyperSites.column_precision`: a Gamma site with
fixed parameters, of shape ``(m,)`` or ``()``, whose value is the diagonal of the emission
family's ``col_precision`` in the original coordinates, with zero off-diagonal, and which feeds
nothing else).  Only the matrix-normal prior of the ``K`` slots' ``A_k`` involves ``lambda``:
as a function of ``lambda`` it is

.. math:: \prod_k \prod_j \lambda_j^{D/2} \exp\{-\tfrac12 \lambda_j (a_{kj} - m_j)^T
          \Sigma_k^{-1} (a_{kj} - m_j)\}

(``a_kj`` the ``j``-th column of ``A_k``, ``m_j`` of ``loc``;
:meth:`~numpyro_hdphmm.emissions.AutoRegressive.column_quadratic_forms`), so the full conditional
is conjugate:

.. math:: \lambda_j \mid A, \Sigma \sim \mathrm{Gamma}\Big(a_j + \frac{K D}{2},\;
          b_j + \frac12 \sum_k (a_{kj} - m_j)^T \Sigma_k^{-1} (a_{kj} - m_j)\Big),

and for one ``lambda`` shared by the ``m`` columns ``Gamma(a + K D m / 2, b + 1/2 sum_j q_j)``.
The sum runs over all ``K`` slots: the model's joint holds the parameters of every slot (a slot
without data carries a draw from its prior), and so does every kernel that keeps them explicit
(weak limit, beam, PGAS), which draws them given the states before this update
(:func:`~numpyro_hdphmm.infer.moves.emission_base.update_emission_parameters`).  The kernels
that integrate ``A`` out in their sweep (direct assignment, RCD) leave the site to their inner
kernel.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from numpyro_hdphmm._core import random as draws

__all__ = ["column_precision_posterior", "sample_column_precision"]


def column_precision_posterior(emission, params, prior):
    """``(shape, rate)`` of the full conditional of the column precisions (module docstring):
    ``emission`` the family with the ``ard_columns`` capability (batch shape ``()``), ``params``
    ``{"A": (K, D, m), "cov": (K, D, D)}`` (every slot), ``prior`` ``(a, b)`` of the site's Gamma
    prior, each of the site's shape: ``(m,)`` (a precision per column) or ``()`` (one for all
    columns).  Returns arrays of that shape."""
    a, b = prior
    q = emission.column_quadratic_forms(params)  # (m,)
    count = params["A"].shape[0] * emission.dim / 2.0  # K D / 2 per column
    if jnp.ndim(a) == 0:
        return a + count * q.shape[0], b + 0.5 * jnp.sum(q)
    return a + count, b + 0.5 * q


def sample_column_precision(rng_key, emission, params, prior) -> jax.Array:
    """A draw of the column precisions ``lambda`` from their full conditional given the
    parameters ``params`` of the ``K`` slots (:func:`column_precision_posterior`; the arguments
    are its own): shape ``(m,)`` or ``()``, the site's, in the dtype of ``prior``."""
    shape, rate = column_precision_posterior(emission, params, prior)
    dtype = jnp.result_type(prior[0], prior[1], float)
    return draws.gamma(rng_key, jnp.asarray(shape, dtype), jnp.asarray(rate, dtype)).astype(dtype)
