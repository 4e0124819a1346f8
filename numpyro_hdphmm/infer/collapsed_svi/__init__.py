r"""Stochastic collapsed variational inference for the (sticky) HDP-HMM and the finite HMM.

Wang & Blunsom (2014), "Stochastic collapsed variational inference for sequential data"
(its printed errors: ``docs/errata.md``), for the same :func:`numpyro_hdphmm.sample` models the MCMC
kernels run: the transition rows and the emission parameters are integrated out, and what is kept
are global expected statistics, updated by closed-form Robbins-Monro averages over minibatches of
whole sequences.  The package, by purpose:

* :mod:`~numpyro_hdphmm.infer.collapsed_svi.core`: the pure core (the state
  :class:`CollapsedSVIState`, the static :class:`SCVIConfig`, :func:`scvi_init`,
  :func:`scvi_update`, :func:`plug_in_hmm`, the length strata of the minibatches); the algorithm,
  step by step, is in its docstring;
* :mod:`~numpyro_hdphmm.infer.collapsed_svi.fitter`: :class:`CollapsedSVI`, the fitter
  (``init`` / ``update`` / ``run`` like :class:`numpyro.infer.SVI`) and its :class:`Convergence` report;
* :mod:`~numpyro_hdphmm.infer.collapsed_svi.guide`: :class:`CollapsedGuide` and
  :class:`CollapsedELBO`, the same updates through ``numpyro.infer.SVI``;
* :mod:`~numpyro_hdphmm.infer.collapsed_svi.downstream`: the plug-in HMM on any sequence, draws
  of every latent site from ``q``, the ArviZ export.

Supported models: every conjugate emission family; ``gamma`` and ``alpha`` constants or sample
sites with Gamma priors; ``kappa`` a constant (the sticky model: ``kappa`` added to the diagonal
pseudo-counts and the override tables removed in the HDP update, an extension of the paper).
Not supported, with a ``NotImplementedError`` naming why: custom emissions (their parameters are
the user's sites), DP-mixture emissions (no closed-form posterior given expected statistics),
``kappa`` (or ``alpha + kappa``, ``kappa / (alpha + kappa)``) as a random site, and any other
latent site (hyperpriors of emission hyperparameters): CollapsedSVI has no inner kernel.

Downstream: :meth:`CollapsedSVI.sample_posterior` and :attr:`CollapsedSVI.guide` give draws of
every latent site from the variational posterior for ``numpyro.infer.Predictive`` (and for
:func:`numpyro_hdphmm.viterbi`, :func:`~numpyro_hdphmm.results.diagnostics.predictive_log_likelihood`,
...); :meth:`CollapsedSVI.state_marginals`, :meth:`CollapsedSVI.viterbi` and
:meth:`CollapsedSVI.predictive_log_likelihood` use the fitted surrogate HMM (the plug-in
posterior means) on any sequence; :meth:`CollapsedSVI.to_inference_data` adds an ArviZ group
``variational`` with the variational parameters and the ELBO trace.
"""

from numpyro_hdphmm.infer.collapsed_svi.core import (
    CollapsedSVIState,
    Minibatch,
    RobbinsMonro,
    SCVIConfig,
    Stratum,
    length_strata,
    merge_states,
    plug_in_hmm,
    scvi_init,
    scvi_update,
)
from numpyro_hdphmm.infer.collapsed_svi.fitter import CollapsedSVI, Convergence
from numpyro_hdphmm.infer.collapsed_svi.guide import STATE_SITE, CollapsedCarry, CollapsedELBO, CollapsedGuide

__all__ = [
    "CollapsedSVI",
    "CollapsedSVIState",
    "CollapsedGuide",
    "CollapsedELBO",
    "CollapsedCarry",
    "STATE_SITE",
    "RobbinsMonro",
    "SCVIConfig",
    "Minibatch",
    "Convergence",
    "Stratum",
    "length_strata",
    "scvi_init",
    "scvi_update",
    "plug_in_hmm",
    "merge_states",
]
