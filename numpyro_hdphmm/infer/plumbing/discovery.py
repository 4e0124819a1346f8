r"""Model discovery: what an HDP-HMM kernel finds in a user's model, as plain functions.

:func:`discover` runs the model on concrete values before anything is compiled (every latent site
at a fixed point of its support, :func:`discovery_trace`) and returns an immutable
:class:`ModelSpec`:

* the sites :func:`numpyro_hdphmm.sample` declared (by their ``infer["hdphmm_role"]`` tag):
  ``{name}_beta``, ``{name}_trans``, the emission parameters, ``{name}_states`` and the observed
  ``{name}``, with the capacity ``K`` and whether there are several sequences;
* the hyperparameter sites that get an exact auxiliary-variable update
  (:mod:`numpyro_hdphmm._core.crp`): ``gamma``, ``alpha``, ``kappa`` with Gamma priors, or
  ``c = alpha + kappa`` with a Gamma prior and ``rho = kappa / c`` with a Beta prior, and the
  concentration of a DP-mixture emission, each a scalar sample site whose value is that quantity
  and which feeds nothing else; the shared base of a categorical emission and its scale; the ARD
  column precisions of an autoregressive emission (a Gamma site whose value is the diagonal of its
  ``col_precision``, :mod:`numpyro_hdphmm.infer.moves.column_precision`).  Recognition is
  numerical (the model is evaluated at probe values of the candidate sites), so any way of writing
  the model works; a probe that fails is reported in the plan, never swallowed;
* the update plan (:class:`UpdatePlan`): for every latent site, whether the algorithm owns it,
  it gets an exact auxiliary-variable update, or the inner kernel (NUTS by default) updates it,
  and why.

:func:`model_view` runs the model at the current values inside a sweep (jittable) and reads the
hyperparameters, the emission family and the data (:class:`ModelView`).
"""

from __future__ import annotations

import warnings
from typing import Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.primitives import Messenger

from numpyro_hdphmm._core.compile import at_top_level, one_off_jit
from numpyro_hdphmm._core.crp import HYPERPARAMETER_UPDATES, Concentrations, HyperPriors
from numpyro_hdphmm._core.validation import check_model_arguments
from numpyro_hdphmm.models.base import HDP_LAYER_ROLES, HDP_ROLE, MODEL_KEY, NAME_KEY, SiteRole

__all__ = [
    "LatentSites",
    "HyperSites",
    "SiteUpdate",
    "UpdatePlan",
    "ModelSpec",
    "SequenceData",
    "ModelView",
    "ObservedData",
    "discover",
    "model_view",
    "prior_trace",
    "discovery_trace",
]


class LatentSites(NamedTuple):
    """The sites of the model declared as ``name`` (:func:`numpyro_hdphmm.sample`), read from its model
    class's description (:meth:`~numpyro_hdphmm.models.base.ModelClass.site_roles`): ``kind`` (the
    model class, e.g. ``"hmm"``); the shared HDP layer ``beta``, ``trans``; the discrete ``states``;
    the observed ``obs``; ``params``: the emission parameters as ``(parameter name, site name)``
    pairs (empty for custom emissions); ``extra``: the further latent sites of the model class as
    ``(key, site name)`` pairs, ``key`` the row's :attr:`~numpyro_hdphmm.models.base.SiteRole.key`
    (empty for the HMM; the HDP-HSMM's duration parameters, e.g. ``("duration_rate", "y_duration_rate")``);
    ``layer``: the site the discrete layer's emission family describes (:attr:`layer_site`)."""

    name: str
    beta: str
    trans: str
    states: str
    obs: str
    params: Tuple[Tuple[str, str], ...]
    kind: str = "hmm"
    extra: Tuple[Tuple[str, str], ...] = ()
    layer: str = ""

    @property
    def layer_site(self) -> str:
        """The site whose law is the discrete layer's ``EmissionLikelihood`` (the data the states
        see): the observed site, or the HDP-SLDS's latent path."""
        return self.layer or self.obs

    @property
    def param_sites(self) -> Tuple[str, ...]:
        return tuple(site for _, site in self.params)

    @property
    def owned(self) -> Tuple[str, ...]:
        """Every site the algorithm updates itself (the emission parameters and the model class's
        further latent sites included)."""
        return (self.beta, self.trans, self.states, *self.param_sites, *(site for _, site in self.extra))

    def role_of(self) -> Dict[str, str]:
        """``{site: role}`` of every owned site (``"params"`` for the emission parameters)."""
        return {self.beta: "beta", self.trans: "trans", self.states: "states",
                **{site: "params" for site in self.param_sites}, **{site: role for role, site in self.extra}}


class HyperSites(NamedTuple):
    """Sites with an exact auxiliary-variable update (``None``: none).  ``alpha``/``kappa``
    (independent Gamma priors) and ``c``/``rho`` (``alpha + kappa`` Gamma, ``kappa / (alpha +
    kappa)`` Beta) are never both set; ``dp_concentration``: a Gamma-prior site whose value is the
    concentration of a DP-mixture emission; ``emission_base``: a Dirichlet site ``phi`` whose value
    times a scalar is the concentration of a categorical emission (the shared base of a two-level
    emission prior, :func:`numpyro_hdphmm.emissions.hierarchical_categorical`); ``emission_scale``:
    with it, a Gamma-prior site whose value is that scalar; ``column_precision``: a Gamma-prior
    site of shape ``(m,)`` (or ``()``) whose value is the diagonal of an autoregressive emission's
    ``col_precision = diag(lambda)`` (or ``lambda I``) in the original coordinates: Fox et al.'s
    (2011) automatic relevance determination (:mod:`numpyro_hdphmm.infer.moves.column_precision`)."""

    gamma: Optional[str] = None
    alpha: Optional[str] = None
    kappa: Optional[str] = None
    c: Optional[str] = None
    rho: Optional[str] = None
    dp_concentration: Optional[str] = None
    emission_base: Optional[str] = None
    emission_scale: Optional[str] = None
    column_precision: Optional[str] = None

    @property
    def sites(self) -> Tuple[str, ...]:
        return tuple(s for s in self if s is not None)


class SiteUpdate(NamedTuple):
    """One row of the update plan: ``site``, ``update`` (``"algorithm"``, ``"exact"``: exact
    auxiliary-variable update, ``"collapsed"``: exact slice-sampling update of the collapsed
    conditional, or ``"inner"``) and ``reason``."""

    site: str
    update: str
    reason: str


_UPDATE_LABELS = {
    "algorithm": "owned by the algorithm",
    "exact": "exact auxiliary-variable update",
    "collapsed": "collapsed slice-sampling update",
    "inner": "inner kernel",
}


class UpdatePlan(tuple):
    """The update plan: a tuple of :class:`SiteUpdate`, printed as a table."""

    def __str__(self) -> str:
        width = max([len(u.site) for u in self] + [4])
        label = max(len(v) for v in _UPDATE_LABELS.values())
        lines = [f"{'site':<{width}}  {'update':<{label}}  why", f"{'-' * width}  {'-' * label}  ---"]
        for u in self:
            lines.append(f"{u.site:<{width}}  {_UPDATE_LABELS[u.update]:<{label}}  {u.reason}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return "UpdatePlan(\n" + str(self) + "\n)"

    def sites(self, update: str) -> Tuple[str, ...]:
        """The sites with the given update (``"algorithm"``, ``"exact"``, ``"collapsed"`` or ``"inner"``)."""
        return tuple(u.site for u in self if u.update == update)


class ModelSpec(NamedTuple):
    """What :func:`discover` found (immutable, static: hashable names and sizes only).

    ``sites``: :class:`LatentSites`; ``capacity``: ``K = max_states``; ``batched``: ``obs`` holds
    several sequences ``(N, T, ...)``; ``beta_prior``: ``"gem"`` (the infinite model) or
    ``"weak_limit"`` (``Dir(gamma/L)``); ``family``: the emission family's class name;
    ``owns_parameters``: the family declares its parameter sites (``False``: custom emissions,
    the user's sites); ``hyper``: :class:`HyperSites`; ``inner_sites``: the sites the inner kernel
    updates; ``plan``: :class:`UpdatePlan`; ``hyperparameters``: how the sites of :attr:`hyper`
    (but a DP-mixture concentration) are updated, ``"auxiliary"`` or ``"collapsed"``
    (:func:`numpyro_hdphmm._core.crp.sample_global`).
    """

    sites: LatentSites
    capacity: int
    batched: bool
    beta_prior: str
    family: str
    owns_parameters: bool
    hyper: HyperSites
    inner_sites: Tuple[str, ...]
    plan: UpdatePlan
    hyperparameters: str = "collapsed"


class SequenceData(NamedTuple):
    """The observations as the sweeps see them: raw ``y (N, T, ...)``, the family's prepared
    observations ``x`` (pytree, leading axes ``(N, T)``), ``valid (N, T)`` (observed and inside
    the sequence) and ``lengths (N,)``."""

    y: jax.Array
    x: object
    valid: jax.Array
    lengths: jax.Array


class ModelView(NamedTuple):
    """The model as one sweep sees it at the current values: the concentrations, the emission
    family (with its current hyperparameters), the data, the priors of the sites with exact
    updates (``priors``; ``dp_concentration_prior``: ``(shape, rate)`` or ``None``;
    ``emission_base_prior``: the ``(C,)`` Dirichlet concentration of the shared emission base, or
    ``None``; ``emission_scale_prior``: ``(shape, rate)`` of its scale's Gamma prior, or ``None``;
    ``column_precision_prior``: ``(shape, rate)`` of the ARD column precisions' Gamma prior, each
    of the site's shape ``(m,)`` or ``()``, or ``None`` (also: held fixed);
    ``states_law``: the law of the states site)."""

    hyper: Concentrations
    emission: object
    data: SequenceData
    priors: HyperPriors
    dp_concentration_prior: Optional[Tuple] = None
    emission_base_prior: Optional[jax.Array] = None
    emission_scale_prior: Optional[Tuple] = None
    #: the law of the states site at the current values (a :class:`~numpyro_hdphmm.MarkovChain` or,
    #: for the HDP-HSMM, a :class:`~numpyro_hdphmm.SemiMarkovChain` with its duration family)
    states_law: object = None
    #: a model class whose data the discrete layer does not see directly (the HDP-SLDS): the
    #: observed site's family and data, :class:`ObservedData`; ``None`` otherwise
    observed: object = None
    column_precision_prior: Optional[Tuple] = None


class ObservedData(NamedTuple):
    """The observed site of a model class whose discrete layer sees a latent path: ``family`` (e.g.
    :class:`~numpyro_hdphmm.models.observation.LinearGaussianObservation`), ``y (N, T, P)`` (NaN:
    missing) and ``valid (N, T)`` (inside the sequences)."""

    family: object
    y: jax.Array
    valid: jax.Array


# ------------------------------------------------------------------------------ tracing
class _RepresentedStates(Messenger):
    """Draw the ``{name}_states`` site among the represented states: the chain's initial and
    transition probabilities restricted to the ``K`` slots and renormalized.  ``MarkovChain.sample``
    draws the same (it redraws a step that went to the mass of the states not represented among
    the represented ones) but warns about each such step, which in a starting value (a draw from
    a prior whose ``gamma`` puts most mass beyond ``K``) is no sign of a problem with the fit."""

    def process_message(self, msg):
        if msg["type"] != "sample" or msg["is_observed"] or (msg.get("infer") or {}).get(HDP_ROLE) != "states":
            return
        fn = msg["fn"]
        chain = unwrap(fn)
        k = chain.num_states
        if chain.transition_matrix.shape[-1] != k + 1:
            return

        def represented(p):
            head = p[..., :k]
            total = jnp.sum(head, -1, keepdims=True)
            return jnp.where(total > 0, head / jnp.where(total > 0, total, 1.0), 1.0 / k)

        new = chain.restricted(represented(chain.initial_probs), represented(chain.transition_matrix))
        msg["fn"] = new.expand(fn.batch_shape) if tuple(fn.batch_shape) != tuple(new.batch_shape) else new


def prior_trace(model, rng_key, model_args=(), model_kwargs=None, *, one_off: bool = False):
    """A trace of ``model`` with every latent site drawn from its prior (unlike NumPyro's
    ``prototype_trace``, this needs no unconstraining transform, e.g. for spherical sites).  The
    states are drawn among the represented states (:class:`_RepresentedStates`), without the
    capacity warning of ``MarkovChain.sample``: this is a starting value, not the fit.

    The draws run as one compiled program; the model is then traced with them substituted, so
    that a trace taken outside ``jit`` (discovery) does not execute, and compile, the samplers of
    every site operation by operation (several seconds for a Dirichlet and an inverse-Wishart
    prior).  ``one_off=True`` (discovery's fallback, :func:`discovery_trace`, whose values decide
    the model's structure only): that program is compiled without backend optimization when
    called outside any trace
    (:func:`~numpyro_hdphmm._core.compile.one_off_jit`; its values then differ from the default
    compilation's in the last bits; ``docs/benchmarks.md``, "Compile time")."""
    model_kwargs = model_kwargs or {}

    def draw(key):
        tr = handlers.trace(handlers.seed(_RepresentedStates(model), key)).get_trace(*model_args, **model_kwargs)
        return {name: site["value"] for name, site in tr.items() if site["type"] == "sample" and not site["is_observed"]}

    one_off = one_off and at_top_level(rng_key, model_args, model_kwargs)  # the data too: closed over
    values = (one_off_jit(draw) if one_off else jax.jit(draw))(rng_key)
    return handlers.trace(handlers.substitute(handlers.seed(model, rng_key), data=values)).get_trace(
        *model_args, **model_kwargs)


class _FeasiblePoints(Messenger):
    """Set every latent sample site to a fixed point of its support (``support.feasible_like``:
    ones for a positive site, the uniform vector on a simplex, the identity for a covariance, the
    lower end of an integer interval, e.g. state 0 for the states) instead of drawing it, so
    that the model runs with no sampler traced or compiled."""

    def process_message(self, msg):
        if msg["type"] != "sample" or msg["is_observed"] or msg["value"] is not None:
            return
        fn = msg["fn"]
        shape = tuple(msg["kwargs"].get("sample_shape") or ()) + tuple(fn.shape())
        dtype = jnp.int32 if fn.support.is_discrete else jnp.result_type(float)
        msg["value"] = fn.support.feasible_like(np.zeros(shape, dtype))


def discovery_trace(model, model_args=(), model_kwargs=None):
    """The trace :func:`discover` reads: ``model`` with every latent site at a fixed point of its
    support (:class:`_FeasiblePoints`; its values decide the model's structure only: the sites,
    their distributions and shapes, and they are the context of the recognition probes).  No
    sampler runs, so nothing is traced or compiled but the model's own operations (a prior draw
    would be traced, lowered and compiled: ``docs/benchmarks.md``, "Compile time").  Where a support has no feasible point (a custom constraint without ``feasible_like``)
    or the model rejects one, the prior draw of :func:`prior_trace` (compiled as a one-off
    program) is used instead."""
    model_kwargs = model_kwargs or {}
    try:
        return handlers.trace(_FeasiblePoints(handlers.seed(model, 0))).get_trace(*model_args, **model_kwargs)
    except Exception:  # noqa: BLE001 (any failure at the fixed points: the prior draw decides)
        return prior_trace(model, jax.random.key(0), model_args, model_kwargs, one_off=True)


def unwrap(fn):
    """The distribution under NumPyro's ``expand``/``to_event``/``mask`` wrappers."""
    while isinstance(fn, (dist.ExpandedDistribution, dist.Independent, dist.MaskedDistribution)):
        fn = fn.base_dist
    return fn


def _is_constant(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _close(a, b) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-10))


def latent_sites(trace) -> Tuple[str, ...]:
    """The unobserved sample sites of ``trace``, in model order."""
    return tuple(name for name, site in trace.items() if site["type"] == "sample" and not site["is_observed"])


def _find_sites(trace, kernel: str) -> Tuple[LatentSites, bool, object]:
    """The declared model's :class:`LatentSites`, whether it has several sequences, and its emission
    family, from the role tags of ``trace`` and the model class's own description of its sites."""
    roles: Dict = {}
    for site_name, site in trace.items():
        if site["type"] != "sample":
            continue
        role = (site.get("infer") or {}).get(HDP_ROLE)
        if role is not None and role != "emission":
            roles.setdefault((site["infer"][NAME_KEY], role), []).append(site_name)
    names = sorted({n for n, _ in roles})
    if not names:
        raise ValueError(f"{kernel}: the model declares no HDP-HMM; use numpyro_hdphmm.sample(name, hmm, obs=y).")
    if len(names) > 1:
        raise NotImplementedError(f"{kernel}: the model declares {len(names)} HDP-HMMs ({names}); one per model is supported.")
    name = names[0]
    obs_sites = roles.get((name, "obs"), [])
    model = (trace[obs_sites[0]].get("infer") or {}).get(MODEL_KEY) if obs_sites else None
    declared = model.site_roles() if model is not None else tuple(SiteRole(r, r) for r in HDP_LAYER_ROLES)
    required = [r.role for r in declared if r.role != "emission"]
    missing = [r for r in required if (name, r) not in roles]
    if missing:
        what = {r.role: r.site(name) for r in declared}
        raise NotImplementedError(
            f"{kernel}: the HDP-HMM '{name}' has no {', '.join(repr(what[r]) for r in missing)} sample site: "
            "`numpyro.handlers.block` hid it, or `numpyro.handlers.reparam` made it a deterministic site. The kernels "
            "update every site numpyro_hdphmm.sample declares; apply block/reparam to the other sites of the model only."
        )
    obs = obs_sites[0]
    if not trace[obs]["is_observed"]:
        raise ValueError(f"{kernel}: the HDP-HMM site '{obs}' must be observed (pass obs=...).")
    for (_, role), site_names in roles.items():
        for site_name in site_names:
            if role != "obs" and trace[site_name]["is_observed"]:
                raise NotImplementedError(_observed_site_message(kernel, name, site_name, role))
    for r in declared:
        if r.role not in HDP_LAYER_ROLES and r.role != "emission" and r.site(name) not in roles[(name, r.role)]:
            raise NotImplementedError(
                f"{kernel}: the model '{name}' has no '{r.site(name)}' sample site: `numpyro.handlers.block` hid it, or "
                "`numpyro.handlers.reparam` made it a deterministic site. The kernels update every site "
                "numpyro_hdphmm.sample declares; apply block/reparam to the other sites of the model only.")
    layer_role = getattr(model, "layer_role", "obs")
    layer = obs if layer_role == "obs" else roles[(name, layer_role)][0]
    fn = trace[layer]["fn"]
    emission = fn.emission
    params = tuple((r.parameter, r.site(name)) for r in declared if r.role == "emission")
    for p, site_name in params if emission.owns_parameters else ():
        site = trace.get(site_name)
        if site is None or site["type"] != "sample":
            raise NotImplementedError(
                f"{kernel}: the HDP-HMM '{name}' has no '{site_name}' sample site: `numpyro.handlers.block` hid it, or "
                "`numpyro.handlers.reparam` made it a deterministic site. The kernels update every site "
                "numpyro_hdphmm.sample declares; apply block/reparam to the other sites of the model only.")
        if site["is_observed"]:
            raise NotImplementedError(_observed_site_message(kernel, name, site_name, "params"))
    sites = LatentSites(
        name=name,
        beta=roles[(name, "beta")][0],
        trans=roles[(name, "trans")][0],
        states=roles[(name, "states")][0],
        obs=obs,
        params=params,
        kind=getattr(model, "kind", "hmm"),
        extra=tuple((r.key, r.site(name)) for r in declared if r.role not in HDP_LAYER_ROLES and r.role != "emission"),
        layer=layer,
    )
    return sites, len(fn.batch_shape) == 2, emission


def _observed_site_message(kernel: str, name: str, site: str, role: str) -> str:
    what = ("held fixed at a known segmentation" if role == "states" else "held fixed")
    remedy = (
        "The kernels resample the states in every sweep. With the segmentation known, the emission parameters' "
        "posterior is conjugate: `hmm.emission.posterior(hmm.emission.sufficient_statistics(x, weights))` with "
        "one-hot weights of the known states (`x, valid = hmm.emission.prepare(y)`)."
        if role == "states" else
        "The kernels update every site numpyro_hdphmm.sample declares; condition on the other sites of the model "
        "(e.g. gamma, alpha, kappa) only."
    )
    return (f"{kernel}: the HDP-HMM site '{site}' is observed ({what} by `numpyro.handlers.condition`, or replaced "
            f"by `numpyro.handlers.reparam`), which the kernels do not support. {remedy}")


def check_handlers(trace, kernel: str) -> None:
    """Refuse the NumPyro effect handlers the kernels' own updates would silently ignore
    (``NotImplementedError`` naming the handler and the site): ``numpyro.handlers.scale`` (a
    tempered likelihood or prior: the conjugate updates use the untempered ones) and
    ``numpyro.handlers.mask`` (a masked-out site: the updates would use it anyway), on any
    sample site of ``trace``."""
    for site_name, site in trace.items():
        if site["type"] != "sample":
            continue
        scale = site.get("scale")
        if scale is not None and not (_is_constant(scale) and np.all(np.asarray(scale) == 1)):
            raise NotImplementedError(
                f"{kernel}: site '{site_name}' is scaled (`numpyro.handlers.scale`, factor "
                f"{np.asarray(scale) if _is_constant(scale) else 'traced'}); the kernels' conjugate and auxiliary-variable "
                "updates use the unscaled likelihood and priors, so the scale would be ignored. Remove the handler; for a "
                "tempered posterior use WeakLimitGibbs(model, tempering=R) (replica exchange, the likelihood raised to "
                "powers from 0 to 1), for a subsampled fit CollapsedSVI(num_sequences=...) on minibatches of sequences."
            )
        fn = site["fn"]
        while isinstance(fn, (dist.ExpandedDistribution, dist.Independent, dist.MaskedDistribution)):
            if isinstance(fn, dist.MaskedDistribution):
                mask = fn._mask
                if mask is not None and not (_is_constant(mask) and np.all(np.asarray(mask))):
                    raise NotImplementedError(
                        f"{kernel}: site '{site_name}' is masked (`numpyro.handlers.mask` or `.mask(...)`); the kernels' "
                        "updates would use the masked-out terms anyway. Mark missing observations with NaN in `obs` "
                        "(or shorter sequences with `lengths=`) instead."
                    )
            fn = fn.base_dist


# ------------------------------------------------------------------------ recognition
def _hyper_values(model, sites: LatentSites, model_args, model_kwargs, values, probed=(), dp_probe=False):
    """``(gamma, alpha, kappa, sigma)`` of the model with ``values`` substituted (``sigma``: the
    emission family's DP concentration, NaN for families without one), and the distribution
    arguments of every other site (all but beta, trans and ``probed``; with ``dp_probe`` also
    leaving out the sites whose prior the DP concentration sets and the family's concentration
    itself, the places ``sigma`` legitimately enters)."""
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(*model_args, **model_kwargs)
    emission = tr[sites.layer_site]["fn"].emission
    sigma = emission.dp_concentration
    has_dp = sigma is not None
    hyper = (tr[sites.beta]["fn"].concentration, tr[sites.trans]["fn"].alpha, tr[sites.trans]["fn"].kappa,
             sigma if has_dp else np.nan)
    skip = {sites.beta, sites.trans, *probed}
    if dp_probe and has_dp:
        skip.update(site for p, site in sites.params if p in emission.dp_concentration_params)
    others = []
    for site_name, site in tr.items():
        if site["type"] != "sample" or site_name in skip:
            continue
        fn = site["fn"]
        if dp_probe and has_dp and site_name == sites.layer_site:
            fn = (fn.emission.with_dp_concentration(0.0), fn.params, fn.states, fn.lengths)
        others.extend(jax.tree_util.tree_leaves(fn))
    return hyper, others


def _prior_params(fn):
    if isinstance(fn, dist.Gamma):
        return fn.concentration, fn.rate
    return fn.concentration1, fn.concentration0


def _describe_prior(fn) -> str:
    fn = unwrap(fn)
    args = {"Gamma": ("concentration", "rate"), "Beta": ("concentration1", "concentration0")}.get(type(fn).__name__)
    if args and all(_is_constant(getattr(fn, a)) and np.ndim(getattr(fn, a)) == 0 for a in args):
        return f"{type(fn).__name__}({', '.join(f'{float(getattr(fn, a)):.4g}' for a in args)})"
    return type(fn).__name__


def _recognize(model, sites: LatentSites, trace, latent, model_args, model_kwargs, own_dp_concentration: bool):
    """``(HyperSites, {site: reason})``: the sites with exact updates and, for every other
    candidate or probed site, why it goes to the inner kernel."""
    owned = set(sites.owned)
    candidates, reasons = {}, {}
    for s in latent:
        if s in owned:
            continue
        site = trace[s]
        fn = unwrap(site["fn"])
        scalar = tuple(site["fn"].shape()) == () and jnp.shape(site["value"]) == ()
        if isinstance(fn, dist.Gamma) and scalar:
            if _is_constant(fn.concentration) and _is_constant(fn.rate):
                candidates[s] = "gamma"
            else:
                reasons[s] = "a Gamma prior whose parameters depend on other sites (the exact update needs a fixed prior)"
        elif isinstance(fn, dist.Beta) and scalar:
            if _is_constant(fn.concentration1) and _is_constant(fn.concentration0):
                candidates[s] = "beta"
            else:
                reasons[s] = "a Beta prior whose parameters depend on other sites (the exact update needs a fixed prior)"
    if not candidates:
        return HyperSites(), reasons
    rng = np.random.default_rng(12345)
    fixed = {s: trace[s]["value"] for s in latent if s not in candidates}
    probes, results = [], []
    for _ in range(3):
        probe = {
            s: jnp.asarray(rng.gamma(2.0, 1.0) if kind == "gamma" else rng.uniform(0.05, 0.95), dtype=jnp.result_type(float))
            for s, kind in candidates.items()
        }
        try:
            hyper, _ = _hyper_values(model, sites, model_args, model_kwargs, {**fixed, **probe})
        except Exception as err:  # reported: the plan says why these sites go to the inner kernel
            why = f"recognition probe failed ({type(err).__name__}: {err})"
            warnings.warn(f"HDP-HMM kernel: the model could not be evaluated at probe values of {sorted(candidates)}: "
                          f"{err}; those sites go to the inner kernel.", UserWarning, stacklevel=4)
            return HyperSites(), {**reasons, **{s: why for s in candidates}}
        if not all(_is_constant(h) for h in hyper):
            why = "the HDP-HMM's concentrations depend on the data or on traced values at the probes"
            return HyperSites(), {**reasons, **{s: why for s in candidates}}
        probes.append(probe)
        results.append([np.asarray(h) for h in hyper])

    def matches(index, site, transform=lambda g, a, k, s: (g, a, k, s)):
        return all(_close(transform(*res)[index], pr[site]) for res, pr in zip(results, probes))

    def feeds_nothing_else(site_names, dp_probe=False):
        base = {**fixed, **probes[0]}
        alt = dict(base)
        for s in site_names:
            alt[s] = probes[1][s]
        ha, a = _hyper_values(model, sites, model_args, model_kwargs, base, site_names, dp_probe)
        hb, b = _hyper_values(model, sites, model_args, model_kwargs, alt, site_names, dp_probe)
        if dp_probe:
            a, b = [*a, *ha[:3]], [*b, *hb[:3]]
        if len(a) != len(b) or not all(_is_constant(x) and _is_constant(y) for x, y in zip(a, b)):
            return False
        return all(np.shape(x) == np.shape(y) and _close(x, y) for x, y in zip(a, b))

    gammas = [s for s, k in candidates.items() if k == "gamma"]
    betas = [s for s, k in candidates.items() if k == "beta"]
    gamma_site = None
    for s in gammas:
        if matches(0, s):
            if feeds_nothing_else([s]):
                gamma_site = s
                break
            reasons[s] = "it is gamma but also enters other sites (the exact update needs it to feed nothing else)"
    const = lambda i: all(_close(results[0][i], r[i]) for r in results)
    alpha_site = next((s for s in gammas if s != gamma_site and matches(1, s)), None)
    kappa_site = next((s for s in gammas if s not in (gamma_site, alpha_site) and matches(2, s)), None)
    sigma_site = None
    for s in gammas:
        if s in (gamma_site, alpha_site, kappa_site) or not matches(3, s):
            continue
        if not own_dp_concentration:
            reasons[s] = "the DP-mixture concentration; this kernel does not update it exactly"
        elif feeds_nothing_else([s], dp_probe=True):
            sigma_site = s
            break
        else:
            reasons[s] = "the DP-mixture concentration, but it also enters other sites"
    hyper = HyperSites(gamma=gamma_site, dp_concentration=sigma_site)
    pair = [s for s in (alpha_site, kappa_site) if s is not None]
    a_ok = alpha_site is not None or const(1)
    k_ok = kappa_site is not None or const(2)
    if pair:
        if a_ok and k_ok and feeds_nothing_else(pair):
            hyper = hyper._replace(alpha=alpha_site, kappa=kappa_site)
        else:
            why = ("alpha and kappa: one is a Gamma site, the other neither constant nor a Gamma site"
                   if not (a_ok and k_ok) else "it also enters other sites (the exact update needs it to feed nothing else)")
            reasons.update({s: why for s in pair})
    if hyper.alpha is None and hyper.kappa is None:
        c_site = next((s for s in gammas if s not in (gamma_site, sigma_site)
                       and matches(1, s, lambda g, a, k, _: (g, a + k, k, _))), None)
        rho_site = next((s for s in betas if matches(2, s, lambda g, a, k, _: (g, a, k / (a + k), _))), None)
        if c_site is not None and rho_site is not None:
            if feeds_nothing_else([c_site, rho_site]):
                hyper = hyper._replace(c=c_site, rho=rho_site)
            else:
                reasons.update({s: "alpha + kappa / kappa / (alpha + kappa), but it also enters other sites" for s in (c_site, rho_site)})
        elif c_site is not None or rho_site is not None:
            found = c_site or rho_site
            reasons[found] = ("alpha + kappa (Gamma) without a Beta site for kappa / (alpha + kappa)" if c_site
                              else "kappa / (alpha + kappa) (Beta) without a Gamma site for alpha + kappa")
    for s in candidates:
        if s not in hyper.sites and s not in reasons:
            reasons[s] = ("a scalar Gamma or Beta site, but not gamma, alpha, kappa, alpha + kappa, "
                          "kappa / (alpha + kappa) or a DP-mixture concentration of the HDP-HMM")
    return hyper, reasons


def _emission_probe(model, sites: LatentSites, model_args, model_kwargs, values, probed):
    """``(the emission family of the layer site, the arguments of every other site)`` at
    ``values``; left out: the ``probed`` sites, the emission parameter sites (whose prior the
    probed quantity sets) and the layer site's emission family (its states, parameters and
    lengths stay in).  Shared by the recognizers of the emission's hyperparameter sites."""
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(*model_args, **model_kwargs)
    skip = {*probed, *sites.param_sites}
    others = []
    for name, entry in tr.items():
        if entry["type"] != "sample" or name in skip:
            continue
        fn = entry["fn"]
        others.extend(jax.tree_util.tree_leaves((fn.params, fn.states, fn.lengths) if name == sites.layer_site else fn))
    return tr[sites.layer_site]["fn"].emission, others


def _recognize_emission_base(model, sites: LatentSites, trace, latent, model_args, model_kwargs, emission, taken):
    """``(base site or None, scale site or None, {site: reason})``.

    The base: a latent Dirichlet site ``phi`` (constant concentration, event ``(C,)``) whose value
    times one scalar is the concentration of a categorical emission (a family with the
    :attr:`~numpyro_hdphmm.emissions.base.EmissionFamily.dirichlet_base` capability) and which feeds
    nothing else.  The scale: then, a scalar Gamma site (constant parameters) whose value is that
    scalar and which feeds nothing else.  Both checked numerically at two probe values."""
    if not emission.dirichlet_base or emission.batch_shape != ():
        return None, None, {}
    num_symbols = emission.num_categories
    owned = set(sites.owned) | set(taken)
    reasons = {}
    rng = np.random.default_rng(54321)
    fixed = {s: trace[s]["value"] for s in latent}
    dtype = jnp.result_type(float)

    def probe(site, values, also=None):
        """``(concentrations, other arguments)`` at each value of ``site`` (and the values
        ``also`` of other sites), or a reason."""
        try:
            probes = [_emission_probe(model, sites, model_args, model_kwargs, {**fixed, **(also or {}), site: v},
                                      (site, *(also or {})))
                      for v in values]
            results = [(family.concentration, others) for family, others in probes]
        except Exception as err:  # reported: the plan says why the site goes to the inner kernel
            return f"recognition probe failed ({type(err).__name__}: {err})"
        if not all(_is_constant(c) and all(_is_constant(x) for x in o) for c, o in results):
            return "the emission's concentration depends on the data or on traced values at the probes"
        return results

    def unchanged(results):
        (_, a), (_, b) = results
        return len(a) == len(b) and all(np.shape(x) == np.shape(y) and _close(x, y) for x, y in zip(a, b))

    base = None
    for s in latent:
        fn = unwrap(trace[s]["fn"])
        if s in owned or not isinstance(fn, dist.Dirichlet) or tuple(trace[s]["fn"].shape()) != (num_symbols,):
            continue
        if not _is_constant(fn.concentration):
            reasons[s] = "a Dirichlet prior whose concentration depends on other sites (the exact update needs a fixed prior)"
            continue
        values = [jnp.asarray(rng.dirichlet(np.full(num_symbols, 2.0)), dtype) for _ in range(2)]
        results = probe(s, values)
        if isinstance(results, str):
            reasons[s] = results
            continue
        scales = [np.asarray(c) / np.asarray(v) for (c, _), v in zip(results, values)]
        if not all(_close(sc, scales[0][0]) for sc in scales):
            reasons[s] = "a Dirichlet site over the emission's categories, but the emission concentration is not a constant times it"
        elif not unchanged(results):
            reasons[s] = "the shared emission base, but it also enters other sites (the exact update needs it to feed nothing else)"
        else:
            base = s
            break
    if base is None:
        return None, None, reasons
    for s in latent:
        fn = unwrap(trace[s]["fn"])
        scalar = tuple(trace[s]["fn"].shape()) == () and jnp.shape(trace[s]["value"]) == ()
        if s in owned or s == base or not (isinstance(fn, dist.Gamma) and scalar):
            continue
        if not (_is_constant(fn.concentration) and _is_constant(fn.rate)):
            continue
        values = [jnp.asarray(v, dtype) for v in (0.7, 2.3)]
        phi = jnp.asarray(rng.dirichlet(np.full(num_symbols, 2.0)), dtype)  # no share near zero
        results = probe(s, values, {base: phi})
        if isinstance(results, str):
            continue
        if all(_close(np.asarray(c) / np.asarray(phi), v) for (c, _), v in zip(results, values)):
            if unchanged(results):
                return base, s, reasons
            reasons[s] = "the scale of the shared emission base, but it also enters other sites"
    return base, None, reasons


def _moved(value, fn):
    """``value`` moved inside the support of ``fn`` (``+0.5`` on the unconstrained scale); ``None``
    for a discrete support."""
    support = fn.support
    if support.is_discrete:
        return None
    transform = biject_to(support)
    return transform(transform.inv(jnp.asarray(value)) + 0.5)


def _recognize_column_precision(model, sites: LatentSites, trace, latent, model_args, model_kwargs, emission, taken):
    """``(site or None, {site: reason})``: Fox et al.'s ARD column precisions of an autoregressive
    emission (a family with the :attr:`~numpyro_hdphmm.emissions.base.EmissionFamily.ard_columns`
    capability, batch shape ``()``, ``A_k (D, m)``).

    A latent site with a Gamma prior (``concentration`` and ``rate`` fixed: unchanged when every
    other latent site of the user's model moves), of shape ``(m,)`` (a precision per column:
    event or batch shape) or ``()`` (one for every column), whose value ``lambda`` at two probes
    gives ``col_precision = diag(lambda)`` (``lambda I``) in the original coordinates (compared,
    as the family stores it, in its centred coordinates:
    ``to_centred_col_precision(diag(lambda)) == col_precision_centred``), and which feeds nothing
    else: the family's other hyperparameters (its pytree leaves but ``col_precision_centred``) and
    the arguments of every other site (but the emission parameters') unchanged between the probes."""
    if not getattr(emission, "ard_columns", False) or emission.batch_shape != ():
        return None, {}
    m = emission.num_regressors
    owned = set(sites.owned) | set(taken)
    rng = np.random.default_rng(24680)
    fixed = {s: trace[s]["value"] for s in latent}
    dtype = jnp.result_type(float)
    reasons = {}
    for s in latent:
        fn = unwrap(trace[s]["fn"])
        shape = tuple(trace[s]["fn"].shape())
        if s in owned or not isinstance(fn, dist.Gamma) or shape not in ((m,), ()):
            continue
        if not (_is_constant(fn.concentration) and _is_constant(fn.rate)):
            reasons[s] = "a Gamma prior whose parameters depend on other sites (the exact update needs a fixed prior)"
            continue
        try:
            moved = {o: _moved(fixed[o], trace[o]["fn"]) for o in latent if o != s and o not in sites.owned}
            moved = {o: v for o, v in moved.items() if v is not None}
            if moved:
                tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data={**fixed, **moved})).get_trace(
                    *model_args, **model_kwargs)
                other = unwrap(tr[s]["fn"])
                if not (isinstance(other, dist.Gamma) and _close(other.concentration, fn.concentration)
                        and _close(other.rate, fn.rate)):
                    reasons[s] = ("a Gamma prior whose parameters depend on other sites (the exact update needs a "
                                  "fixed prior)")
                    continue
            values = [jnp.asarray(rng.gamma(2.0, 1.0, shape) + 0.1, dtype) for _ in range(2)]
            results = [_emission_probe(model, sites, model_args, model_kwargs, {**fixed, s: v}, (s,))
                       for v in values]
        except Exception as err:  # reported: the plan says why the site goes to the inner kernel
            reasons[s] = f"recognition probe failed ({type(err).__name__}: {err})"
            continue
        families = [f for f, _ in results]
        leaves = [jax.tree_util.tree_leaves(f) for f in families] + [o for _, o in results]
        if not all(_is_constant(x) for group in leaves for x in group):
            reasons[s] = "the emission's column precision depends on the data or on traced values at the probes"
            continue
        if not all(getattr(f, "ard_columns", False) and f.batch_shape == () for f in families):
            continue
        expected = [f.to_centred_col_precision(jnp.diag(v) if v.ndim else v * jnp.eye(m, dtype=dtype))
                    for f, v in zip(families, values)]
        if not all(_close(f.col_precision_centred, e) for f, e in zip(families, expected)):
            if not _close(families[0].col_precision_centred, families[1].col_precision_centred):
                reasons[s] = ("a Gamma site that enters the autoregressive emission's col_precision, but not as its "
                              "diagonal (the exact ARD update needs col_precision = diag(lambda), a precision per "
                              f"column of shape ({m},), or lambda I; other forms go to the inner kernel)")
            continue
        # the family's other hyperparameters: its leaves but the column precision itself
        rest = [[x for x in jax.tree_util.tree_leaves(f) if x is not f.col_precision_centred] for f in families]
        same_family = len(rest[0]) == len(rest[1]) and all(
            np.shape(x) == np.shape(y) and _close(x, y) for x, y in zip(*rest))
        (_, oa), (_, ob) = results
        same_others = len(oa) == len(ob) and all(np.shape(x) == np.shape(y) and _close(x, y) for x, y in zip(oa, ob))
        if same_family and same_others:
            return s, reasons
        reasons[s] = ("the ARD column precisions of the autoregressive emission, but it also enters other sites or "
                      "the emission's other hyperparameters (the exact update needs it to feed nothing else)")
    return None, reasons


_EXACT_REASONS = {
    "gamma": "gamma: Escobar-West auxiliary variables given the informative tables (Fox et al. eqs. 54-56)",
    "alpha": "alpha: Beta auxiliaries of the restaurants given the tables (Fox et al. App. III, independent Gamma priors)",
    "kappa": "kappa: Beta auxiliaries given the override tables (Fox et al. App. III, independent Gamma priors)",
    "c": "alpha + kappa: Beta auxiliaries given the tables (Fox et al. eqs. 50-53)",
    "rho": "kappa / (alpha + kappa): Beta given the override tables (Fox et al. eq. 50)",
    "dp_concentration": "DP-mixture concentration: auxiliary variables given the component tables (Fox et al. App. III)",
    "emission_base": "shared emission base: Dir(prior + m_.c) given the tables of the states' emission restaurants, "
                     "the emission probabilities integrated out (Teh et al. 2006 Sec. 5)",
    "emission_scale": "scale of the shared emission base: Beta auxiliaries given the tables of the states' emission "
                      "restaurants (Teh et al. 2006 App. A)",
    "column_precision": "ARD column precisions of A: conjugate Gamma(a + K D / 2, b + 1/2 sum_k (a_kj - m_j)^T "
                        "Sigma_k^-1 (a_kj - m_j)) per column j (one precision for all m columns: a + K D m / 2 and "
                        "the sum over j too) given A, Sigma of all K slots (Fox et al. 2011, ARD)",
}

#: why a kernel that integrates the emission parameters out leaves the ARD site to its inner kernel
_COLUMN_PRECISION_NOT_OWNED = (
    "the ARD column precisions of the autoregressive emission, but this kernel integrates A out in its sweep and "
    "draws A, Sigma for the record only, so it has no conjugate step for them; updated given the rest (the "
    "recorded A, Sigma)")

_COLLAPSED_REASONS = {
    "gamma": "gamma: slice sampling of log gamma given the informative tables, beta integrated out",
    "pair": "{site}: slice sampling of log(alpha + kappa) and logit(kappa / (alpha + kappa)) given the states and "
            "beta, the rows integrated out (Dirichlet-multinomial)",
    "alpha": "alpha: slice sampling of log alpha given the states and beta, the rows integrated out (Dirichlet-multinomial)",
    "kappa": "kappa: slice sampling of log kappa given the states and beta, the rows integrated out (Dirichlet-multinomial)",
}


#: the roles whose update ``hyperparameters="collapsed"`` changes (the HDP's concentrations)
_COLLAPSED_ROLES = ("gamma", "alpha", "kappa", "c", "rho")


def _collapsed_reason(role: str, hyper: HyperSites) -> str:
    if role == "gamma":
        return _COLLAPSED_REASONS["gamma"]
    both = hyper.c is not None or (hyper.alpha is not None and hyper.kappa is not None)
    names = {"alpha": "alpha", "kappa": "kappa", "c": "alpha + kappa", "rho": "kappa / (alpha + kappa)"}
    return _COLLAPSED_REASONS["pair"].format(site=names[role]) if both else _COLLAPSED_REASONS[role]


def _check_inner_supports(model, sites: LatentSites, trace, latent, inner_sites, model_args, model_kwargs, kernel):
    """Reject inner-kernel sites whose support lets the model become invalid.

    The inner NUTS kernel moves each of its sites over the whole support of the site's
    distribution.  A hyperprior on the real line (``gamma ~ Normal(3, 1)``) then reaches negative
    concentrations, where the HDP-HMM is undefined (NaN rows and densities).  Each inner site is
    evaluated at points spread over its support (the support's bijection at unconstrained values
    -10, -1, 1, 10, the other sites at the prior draw); a model that rejects one of them (a
    ``ValueError``, e.g. a non-positive ``gamma``, ``alpha``, ``kappa`` or emission concentration)
    is reported, naming the site, before anything is compiled.
    """
    fixed = {s: trace[s]["value"] for s in latent}
    for site in inner_sites:
        support = trace[site]["fn"].support
        if support.is_discrete:
            continue
        transform = biject_to(support)
        shape = transform.inverse_shape(jnp.shape(trace[site]["value"]))
        for u in (-10.0, -1.0, 1.0, 10.0):
            value = transform(jnp.full(shape, u, jnp.result_type(float)))
            try:
                _hyper_values(model, sites, model_args, model_kwargs, {**fixed, site: value})
            except ValueError as err:
                raise ValueError(
                    f"{kernel}: the inner NUTS kernel moves site '{site}' over its whole support "
                    f"({support}), but the model is invalid at {site} = {np.asarray(value).ravel()[:3]}: {err} "
                    f"Give '{site}' a prior on the values the model accepts (for a concentration: Gamma, "
                    "LogNormal or HalfNormal) or transform it (e.g. jnp.exp of a real-valued site)."
                ) from err


def discover(model, model_args=(), model_kwargs=None, *, kernel: str = "HDP-HMM kernel",
             exact_hyperparameters: bool = True, own_dp_concentration: bool = True,
             describe: Optional[Dict[str, str]] = None, hyperparameters: str = "collapsed",
             own_column_precision: bool = False) -> ModelSpec:
    """Trace ``model`` once on concrete values (:func:`discovery_trace`) and return its
    :class:`ModelSpec`.

    ``model``: the model as the kernel samples it (conditioned on any sites another Gibbs block
    owns, ``numpyro.infer.gibbs.conditioned``); ``kernel``: the kernel's name for messages;
    ``exact_hyperparameters``: recognize sites for the exact updates (``False``: every
    hyperparameter site goes to the inner kernel); ``own_dp_concentration``: the algorithm updates
    a DP-mixture emission's concentration site exactly; ``describe``: what the algorithm does with
    each of its sites, by role (``"beta"``, ``"trans"``, ``"states"``, ``"params"``), for the plan;
    ``hyperparameters``: ``"auxiliary"`` (Fox et al.'s auxiliary variables) or ``"collapsed"``
    (slice sampling of the collapsed conditionals) for the recognized concentrations;
    ``own_column_precision``: the algorithm draws the ARD column precisions of an autoregressive
    emission exactly (it keeps the emission parameters explicit; otherwise a recognized site goes
    to the inner kernel, the plan says why).
    Runs eagerly on concrete values (also when called while a caller traces, e.g. under ``pmap``).
    """
    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    describe = describe or {}
    if hyperparameters not in HYPERPARAMETER_UPDATES:
        raise ValueError(f"`hyperparameters` must be one of {HYPERPARAMETER_UPDATES}, got {hyperparameters!r}.")
    check_model_arguments(model_args, model_kwargs, kernel)
    with jax.ensure_compile_time_eval():
        trace = discovery_trace(model, model_args, model_kwargs)
        check_handlers(trace, kernel)
        sites, batched, emission = _find_sites(trace, kernel)
        latent = latent_sites(trace)
        beta_fn = trace[sites.beta]["fn"]
        capacity = beta_fn.event_shape[0] - 1
        beta_prior = unwrap(beta_fn).weights_prior
        if exact_hyperparameters:
            hyper, reasons = _recognize(model, sites, trace, latent, model_args, model_kwargs, own_dp_concentration)
            base_site, scale_site, base_reasons = _recognize_emission_base(model, sites, trace, latent, model_args,
                                                                           model_kwargs, emission, hyper.sites)
            hyper = hyper._replace(emission_base=base_site, emission_scale=scale_site)
            reasons.update(base_reasons)
            for s in (base_site, scale_site):
                reasons.pop(s, None)
            ard_site, ard_reasons = _recognize_column_precision(model, sites, trace, latent, model_args, model_kwargs,
                                                                emission, hyper.sites)
            reasons.update(ard_reasons)
            if ard_site is not None and own_column_precision:
                hyper = hyper._replace(column_precision=ard_site)
                reasons.pop(ard_site, None)
            elif ard_site is not None:
                reasons[ard_site] = _COLUMN_PRECISION_NOT_OWNED
        else:
            hyper, reasons = HyperSites(), {}
        owned = set(sites.owned)
        inner = tuple(s for s in latent if s not in owned and s not in hyper.sites)
        _check_inner_supports(model, sites, trace, latent, inner, model_args, model_kwargs, kernel)
    rows = []
    role_of = sites.role_of()
    exact_role = {site: role for role, site in hyper._asdict().items() if site is not None}
    # what the algorithm says about a role: for this model class (``"{kind}:{role}"``) first; a row of a
    # parameter (``"duration_rate"``) by its role (``"duration"``)
    said = lambda r: next((describe[k] for k in (f"{sites.kind}:{r}", r, f"{sites.kind}:{r.partition('_')[0]}",
                                                 r.partition("_")[0]) if k in describe), None)
    for s in latent:
        if s in role_of:
            rows.append(SiteUpdate(s, "algorithm", said(role_of[s]) or role_of[s]))
        elif s in exact_role and said(exact_role[s]) is not None:
            rows.append(SiteUpdate(s, "exact", f"{_describe_prior(trace[s]['fn'])} prior; {said(exact_role[s])}"))
        elif s in exact_role and hyperparameters == "collapsed" and exact_role[s] in _COLLAPSED_ROLES:
            why = f"{_describe_prior(trace[s]['fn'])} prior; {_collapsed_reason(exact_role[s], hyper)}"
            rows.append(SiteUpdate(s, "collapsed", why))
        elif s in exact_role:
            rows.append(SiteUpdate(s, "exact", f"{_describe_prior(trace[s]['fn'])} prior; {_EXACT_REASONS[exact_role[s]]}"))
        else:
            if not exact_hyperparameters:
                why = "exact_hyperparameters=False"
            elif s in reasons:
                why = reasons[s]
            elif not emission.owns_parameters:
                why = "a site of the user's model (e.g. a parameter of the custom emission or a hyperprior), given the rest"
            else:
                prior = _describe_prior(trace[s]["fn"])
                why = (f"{prior} prior: the exact updates need a scalar Gamma prior (Beta for kappa / (alpha + kappa)); "
                       "updated given the rest, with the transition rows integrated out")
            rows.append(SiteUpdate(s, "inner", why))
    return ModelSpec(
        sites=sites,
        capacity=int(capacity),
        batched=bool(batched),
        beta_prior=beta_prior,
        family=type(emission).__name__,
        owns_parameters=bool(emission.owns_parameters),
        hyper=hyper,
        inner_sites=inner,
        plan=UpdatePlan(rows),
        hyperparameters=hyperparameters,
    )


# --------------------------------------------------------------------------- the view
def model_view(model, spec: ModelSpec, model_args, model_kwargs, values) -> ModelView:
    """Run ``model`` at ``values`` (every latent site) and read the concentrations, the emission
    family and the data (pure; called inside the jitted sweep)."""
    sites = spec.sites
    tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(*model_args, **model_kwargs)
    obs_fn = tr[sites.layer_site]["fn"]
    emission = obs_fn.emission
    y = jnp.asarray(tr[sites.layer_site]["value"])
    if not spec.batched:
        y = y[None]
    x, valid = jax.vmap(emission.prepare)(y)
    num_seq, num_steps = valid.shape
    lengths = obs_fn.lengths if obs_fn.lengths is not None else jnp.full((num_seq,), num_steps, jnp.int32)
    inside = jnp.arange(num_steps) < lengths[:, None]
    valid = valid & inside
    observed = None
    if sites.layer_site != sites.obs:
        y_obs = jnp.asarray(tr[sites.obs]["value"])
        observed = ObservedData(tr[sites.obs]["fn"].observation, y_obs if spec.batched else y_obs[None], inside)
    hyper_sites = spec.hyper
    prior = lambda s: None if s is None else _prior_params(unwrap(tr[s]["fn"]))
    trans_fn = tr[sites.trans]["fn"]
    return ModelView(
        hyper=Concentrations(tr[sites.beta]["fn"].concentration, trans_fn.alpha, trans_fn.kappa),
        emission=emission,
        data=SequenceData(y=y, x=x, valid=valid, lengths=lengths),
        priors=HyperPriors(gamma=prior(hyper_sites.gamma), alpha=prior(hyper_sites.alpha), kappa=prior(hyper_sites.kappa),
                           c=prior(hyper_sites.c), rho=prior(hyper_sites.rho)),
        dp_concentration_prior=prior(hyper_sites.dp_concentration),
        emission_base_prior=(None if hyper_sites.emission_base is None
                             else unwrap(tr[hyper_sites.emission_base]["fn"]).concentration),
        emission_scale_prior=prior(hyper_sites.emission_scale),
        states_law=unwrap(tr[sites.states]["fn"]),
        observed=observed,
        column_precision_prior=(None if hyper_sites.column_precision is None
                                else _site_prior(tr[hyper_sites.column_precision])),
    )


def _site_prior(site):
    """``(concentration, rate)`` of a Gamma site's prior, each broadcast to the site's shape."""
    fn = unwrap(site["fn"])
    shape = tuple(site["fn"].shape())
    dtype = jnp.result_type(site["value"], float)
    return tuple(jnp.broadcast_to(jnp.asarray(p, dtype), shape) for p in (fn.concentration, fn.rate))
