"""The base class every HDP-HMM kernel is built on.

A kernel of this package is a NumPyro :class:`~numpyro.infer.mcmc.MCMCKernel` over the user's
model.  The base class

* traces the model once and finds the sites :func:`numpyro_hdphmm.sample` declared (by their
  ``infer["hdphmm_role"]`` tag): ``{name}_beta``, ``{name}_trans``, the emission parameters,
  ``{name}_states`` and the observed ``{name}``; the algorithm owns them;
* recognizes the hyperparameter sites that have an exact auxiliary-variable update
  (:mod:`numpyro_hdphmm._core.crp`): ``gamma``, ``alpha``, ``kappa`` with Gamma priors, or
  ``alpha + kappa`` with a Gamma prior and ``rho = kappa / (alpha + kappa)`` with a Beta prior,
  each a sample site that feeds nothing else; recognition is numerical (the model is evaluated
  at probe values of the candidate sites), so any way of writing the model works;
* updates every other latent site with an inner kernel (NUTS by default) on the model's joint
  density conditioned on the rest, refreshed after each sweep;
* implements NumPyro's block protocol (``model``, ``refresh``, ``wrap_model``,
  ``get_constrain_fn``), so a kernel can be one block of :class:`numpyro.infer.Gibbs`, and
  vectorizes itself over chains (``chain_method="vectorized"``).

A subclass implements :meth:`HDPKernel._init_owned` (initial values of the owned sites) and
:meth:`HDPKernel._sweep` (one sweep of the algorithm given the model view).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import random
from jax.scipy.special import gammaln
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.infer import NUTS
from numpyro.infer.gibbs import conditioned, latent_sample_sites, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import log_density
from numpyro.primitives import Messenger
from numpyro.util import is_prng_key

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.validation import host_warning
from numpyro_hdphmm.distributions import EmissionLikelihood, sample_dirichlet
from numpyro_hdphmm.primitives import HDP_ROLE

__all__ = ["HDPState", "HDPSites", "HyperUpdates", "ModelView", "HDPKernel"]


class HDPState(NamedTuple):
    """State of every HDP-HMM kernel.

    ``z``: constrained values of all latent sites the kernel updates; ``num_states``: states in
    use; ``lp``: log joint density of the model at ``z``; ``overflow``: whether the capacity was
    reached (infinite-state kernels); ``accept_prob``/``diverging``: statistics of the inner
    kernel (1.0/False without one); ``aux``: algorithm-specific auxiliary state;
    ``inner_state``: the inner kernel's state (or ``None``); ``rng_key``.
    """

    z: Dict[str, jax.Array]
    num_states: jax.Array
    lp: jax.Array
    overflow: jax.Array
    accept_prob: jax.Array
    diverging: jax.Array
    aux: Any
    inner_state: Any
    rng_key: jax.Array


class HDPSites(NamedTuple):
    """Static description of the HDP-HMM sites of a model (found by tracing it once)."""

    name: str
    beta: str
    trans: str
    states: str
    obs: str
    emission: Tuple[str, ...]
    param_names: Tuple[str, ...]
    num_states: int
    batched: bool  # several sequences (N, T, ...)


class HyperUpdates(NamedTuple):
    """Which hyperparameters get an exact auxiliary-variable update, and from which site.

    ``gamma``: site name or ``None``; ``concentration``: ``"independent"`` (``alpha`` and/or
    ``kappa`` sites with Gamma priors, the other constant), ``"c_rho"`` (``alpha + kappa`` Gamma,
    ``rho`` Beta) or ``None``; ``alpha``/``kappa``/``c``/``rho``: the site names (or ``None``).
    ``emission_concentration``: a scalar Gamma-prior site whose value is the concentration ``sigma``
    of a :class:`~numpyro_hdphmm.emissions.DPMixture` emission (and feeds nothing else); its prior is
    passed to the emission's ``update_parameters``, which returns the new value.
    """

    gamma: Optional[str] = None
    concentration: Optional[str] = None
    alpha: Optional[str] = None
    kappa: Optional[str] = None
    c: Optional[str] = None
    rho: Optional[str] = None
    emission_concentration: Optional[str] = None

    @property
    def sites(self) -> Tuple[str, ...]:
        return tuple(
            s for s in (self.gamma, self.alpha, self.kappa, self.c, self.rho, self.emission_concentration) if s is not None
        )


class ModelView(NamedTuple):
    """The model as one sweep sees it at the current values.

    ``gamma``, ``alpha``, ``kappa``: hyperparameter values; ``emission``: the emission family
    (with its current hyperparameters); ``y``: observations ``(N, T, ...)``; ``x``, ``valid``:
    the family's prepared observations and mask, ``(N, T, ...)`` and ``(N, T)``; ``lengths``
    ``(N,)``; ``priors``: ``{site: fn}`` of the recognized hyperparameter sites.
    """

    gamma: jax.Array
    alpha: jax.Array
    kappa: jax.Array
    emission: Any
    y: jax.Array
    x: Any
    valid: jax.Array
    lengths: jax.Array
    priors: Dict[str, Any]


def _unwrap(fn):
    while isinstance(fn, (dist.ExpandedDistribution, dist.Independent, dist.MaskedDistribution)):
        fn = fn.base_dist
    return fn


def _is_scalar_site(site, cls) -> bool:
    fn = _unwrap(site["fn"])
    return isinstance(fn, cls) and tuple(site["fn"].shape()) == () and jnp.shape(site["value"]) == ()


def _is_constant(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


#: data size (elements) above which the initial log joint is compiled rather than run eagerly
_COMPILE_LOG_JOINT_SIZE = 1_000_000


def _num_used(states, num_states: int):
    """Number of distinct states in ``states`` (any shape), as int32."""
    used = jnp.zeros(num_states, bool).at[jnp.reshape(states, -1)].set(True)
    return jnp.sum(used).astype(jnp.int32)


def flatten_time(x):
    """Merge the sequence and time axes ``(N, T, ...) -> (N * T, ...)`` of every leaf (the
    prepared observations of all sequences as one time axis)."""
    return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), x)


def canonical_order(z_flat, in_range, num_states: int):
    """``(new_of_old (K,), old_of_new (K,))``: relabel the states by first appearance in
    ``z_flat`` (steps outside ``in_range`` ignored), unused slots last."""
    steps = z_flat.shape[0]
    first_seen = jnp.full(num_states, steps, jnp.int32).at[jnp.where(in_range, z_flat, num_states)].min(
        jnp.arange(steps, dtype=jnp.int32), mode="drop"
    )
    old_of_new = jnp.argsort(first_seen, stable=True).astype(jnp.int32)
    new_of_old = jnp.zeros(num_states, jnp.int32).at[old_of_new].set(jnp.arange(num_states, dtype=jnp.int32))
    return new_of_old, old_of_new


def row_concentrations(beta, alpha, kappa, n, first):
    """``(K+1, K+1)`` concentrations of the rows' conditionals given the states: ``alpha beta +
    kappa e_j + n_j.`` for the state rows and ``alpha beta + n_0.`` for the start row (last), the
    last column being the mass of the states not represented (Fox et al. eqs. 37, 41)."""
    num_states = beta.shape[0] - 1
    sticky = jnp.eye(num_states + 1, dtype=beta.dtype).at[num_states, num_states].set(0.0)
    return alpha * beta[None, :] + kappa * sticky + row_counts(n, first, beta.dtype)


def row_counts(n, first, dtype):
    """The transition counts ``n (K, K)`` and start counts ``first (K,)`` as the ``(K+1, K+1)``
    count matrix of the rows (start row last, nothing in the remainder column)."""
    num_states = first.shape[0]
    counts = jnp.zeros((num_states + 1, num_states + 1), dtype)
    return counts.at[:num_states, :num_states].set(n).at[num_states, :num_states].set(first)


def _log_dirichlet_multinomial(conc, counts):
    """``sum_j log [Gamma(c_j.) / Gamma(c_j. + n_j.) prod_k Gamma(c_jk + n_jk) / Gamma(c_jk)]``: the
    probability of the transitions with the rows ``Dir(c_j)`` integrated out; an atom with zero
    concentration takes no transition (``-inf`` if it does)."""
    positive = conc > 0
    safe = jnp.where(positive, conc, 1.0)
    atoms = jnp.where(positive, gammaln(safe + counts) - gammaln(safe), jnp.where(counts > 0, -jnp.inf, 0.0))
    total = jnp.sum(conc, -1)
    return jnp.sum(gammaln(total) - gammaln(total + jnp.sum(counts, -1)) + jnp.sum(atoms, -1))


class _CollapsedChain(dist.Distribution):
    """The states site of the inner kernel's model: the log-probability of the observed states
    with the transition rows integrated out (:func:`_log_dirichlet_multinomial` of their counts),
    put on the first element of the batch (it does not factor over sequences)."""

    support = constraints.nonnegative_integer

    def __init__(self, conc, lengths, batch_shape, event_shape):
        self.conc, self.lengths = conc, lengths
        super().__init__(batch_shape=batch_shape, event_shape=event_shape)

    def sample(self, key, sample_shape=()):
        raise NotImplementedError("the collapsed states site is observed (conditioned) in the inner model")

    def log_prob(self, value):
        num_states = self.conc.shape[-1] - 1
        n, first = crp.transition_counts(value, num_states, self.lengths)
        total = _log_dirichlet_multinomial(self.conc, row_counts(n, first, self.conc.dtype))
        return jnp.zeros(self.batch_shape, total.dtype).at[(0,) * len(self.batch_shape)].set(total) if self.batch_shape else total


class _CollapseRows(Messenger):
    """The model as the inner kernel sees it: the transition rows integrated out.

    The ``{name}_trans`` site contributes nothing and the ``{name}_states`` site the probability of
    the states given ``alpha``, ``beta``, ``kappa`` with the rows integrated out (Dirichlet-
    multinomial, Fox et al. eq. 37's normalizers).  The inner kernel then updates every site that
    shapes the rows (hyperpriors without an exact update, however the model computes ``alpha`` and
    ``kappa``) from its conditional with the rows integrated out, and the kernel redraws the rows
    from ``Dir(alpha beta + kappa e_j + n_j.)`` afterwards (a partially collapsed Gibbs block).
    Evaluating the rows' Dirichlet density instead is inexact in floating point: a row entry
    whose concentration is tiny (``alpha beta_k`` for an unused weak-limit state) underflows to 0,
    and the density at the clamped value drives ``alpha`` upwards without bound.
    """

    def __init__(self, fn=None):
        self._conc = None
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        role = (msg.get("infer") or {}).get(HDP_ROLE)
        if role == "trans":
            self._conc = msg["fn"].concentration
            msg["fn"] = msg["fn"].mask(False)
        elif role == "states" and self._conc is not None:
            chain = msg["fn"]  # several sequences without lengths: MarkovChain expanded by the plate
            lengths = _unwrap(chain).lengths
            msg["fn"] = _CollapsedChain(self._conc, lengths, tuple(chain.batch_shape), tuple(chain.event_shape))


def _prior_trace(model, rng_key, model_args, model_kwargs):
    """A trace of ``model`` with every latent site drawn from its prior (unlike NumPyro's
    ``prototype_trace``, this needs no unconstraining transform, e.g. for spherical sites)."""
    return handlers.trace(handlers.seed(model, rng_key)).get_trace(*model_args, **model_kwargs)


def _warn_overflow(overflow, capacity, kernel):
    if np.any(np.asarray(overflow)):
        what = (
            "so the weak-limit approximation had no free state left (it is accurate only when L is well above "
            "the number of states in use)"
            if kernel == "WeakLimitGibbs"
            else "so no new state could be instantiated there (the draw is from the model truncated at max_states)"
        )
        warnings.warn(
            f"{kernel}: all max_states={capacity} state slots were occupied in a sweep, {what}; "
            "increase max_states. The `overflow` field (extra_fields=('overflow',)) marks those sweeps.",
            RuntimeWarning,
            stacklevel=2,
        )


#: capacities above this warn at initialization (see :func:`_check_capacity`)
LARGE_CAPACITY = 1024


def _check_capacity(capacity: int, kernel: str) -> None:
    """Warn when ``max_states`` exceeds :data:`LARGE_CAPACITY`: the explicit sites hold a
    ``(K+1, K+1)`` transition matrix, so compile time, memory and every stored draw grow with
    ``K^2`` (measured on 2 CPU cores, T = 100: 17 s at K = 1000, 55 s and 1.7 GB at K = 2000,
    6-15 minutes and 6-8 GB at K = 5000)."""
    if capacity > LARGE_CAPACITY:
        warnings.warn(
            f"{kernel}: max_states={capacity} is above {LARGE_CAPACITY}. Compile time and memory grow with "
            f"max_states^2 (the {capacity + 1} x {capacity + 1} transition matrix is a site of the model and of every "
            "stored draw): about a minute to compile at 2000, many minutes and several GB at 5000. The infinite-model "
            "kernels instantiate states only as the data need them and the weak limit needs L of the order of a few "
            "times the expected number of states: a capacity of 2-5 times the number of states you expect is enough.",
            RuntimeWarning,
            stacklevel=2,
        )


def _close(a, b) -> bool:
    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-10))


class HDPKernel(MCMCKernel):
    """Base class of the HDP-HMM kernels (see the module docstring).

    :param model: the NumPyro model; it must declare one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param inner_kernel: kernel for the latent sites the algorithm does not own and cannot
        update exactly; ``None`` builds ``NUTS`` on the model.  It is re-bound to the model
        conditioned on every other site (``kernel.wrap_model``).
    :param exact_hyperparameters: use the exact auxiliary-variable updates where they apply
        (``False`` sends every hyperparameter site to the inner kernel).
    """

    sample_field = "z"

    def __init__(self, model, *, inner_kernel: Optional[MCMCKernel] = None, exact_hyperparameters: bool = True):
        if not callable(model):
            raise ValueError("`model` must be a NumPyro model (a callable).")
        self._model = model
        self._inner_proto = inner_kernel
        self._exact_hyper = exact_hyperparameters
        self._inner = None
        self._sites: Optional[HDPSites] = None
        self._hyper = HyperUpdates()
        self._inner_sites: Tuple[str, ...] = ()
        self._sample_fn = None

    # ------------------------------------------------------------------ protocol
    @property
    def model(self):
        """The model the kernel samples (what ArviZ re-runs and :class:`numpyro.infer.Gibbs`
        compares across blocks): the user's model, or its approximation for approximate kernels."""
        return self._inference_model

    @property
    def _inference_model(self):
        """The model as sampled (subclasses may transform it, e.g. the weak-limit prior)."""
        return self._model

    @property
    def default_fields(self):
        return ("z", "num_states", "lp", "overflow", "accept_prob", "diverging")

    def get_diagnostics_str(self, state):
        return f"{int(state.num_states)} states, lp {float(state.lp):.4g}"

    def refresh(self, state, model_args, model_kwargs):
        """Recompute the log joint after sibling blocks of a :class:`numpyro.infer.Gibbs` moved."""
        lp, _ = log_density(self._inference_model, model_args, model_kwargs or {}, state.z)
        return state._replace(lp=lp)

    def wrap_model(self, wrapper):
        new = copy.copy(self)
        new._model = wrapper(self._model)
        new._sample_fn = None
        return new

    def get_constrain_fn(self, model_args, model_kwargs):
        return lambda z: z

    def postprocess_fn(self, model_args, model_kwargs):
        sites = self._sites

        def add_num_states(z):
            if sites is None or sites.states not in z:
                return z
            return {**z, f"{sites.name}_num_states": _num_used(z[sites.states], sites.num_states)}

        return add_num_states

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_sample_fn"] = None
        return state

    # ------------------------------------------------------------------ discovery
    def _discover(self, model_trace) -> HDPSites:
        roles: Dict[str, list] = {}
        for site_name, site in model_trace.items():
            if site["type"] != "sample":
                continue
            role = (site.get("infer") or {}).get(HDP_ROLE)
            if role is not None and role != "emission":
                roles.setdefault((site["infer"]["hdphmm_name"], role), []).append(site_name)
        names = sorted({n for n, _ in roles})
        if not names:
            raise ValueError(
                f"{type(self).__name__}: the model declares no HDP-HMM; use numpyro_hdphmm.sample(name, hmm, obs=y)."
            )
        if len(names) > 1:
            raise NotImplementedError(
                f"{type(self).__name__}: the model declares {len(names)} HDP-HMMs ({names}); one per model is supported."
            )
        name = names[0]
        obs = roles[(name, "obs")][0]
        if not model_trace[obs]["is_observed"]:
            raise ValueError(f"{type(self).__name__}: the HDP-HMM site '{obs}' must be observed (pass obs=...).")
        fn = model_trace[obs]["fn"]
        emission = fn.emission
        param_sites = tuple(f"{name}_{p}" for p in emission.param_names)
        beta = roles[(name, "beta")][0]
        return HDPSites(
            name=name,
            beta=beta,
            trans=roles[(name, "trans")][0],
            states=roles[(name, "states")][0],
            obs=obs,
            emission=param_sites,
            param_names=tuple(emission.param_names),
            num_states=model_trace[beta]["fn"].event_shape[0] - 1,
            batched=len(fn.batch_shape) == 2,
        )

    def _hyper_values(self, model_args, model_kwargs, values, probed=(), emission_probe=False):
        """``(gamma, alpha, kappa, sigma)`` of the model with ``values`` substituted (``sigma``: the
        concentration of a :class:`~numpyro_hdphmm.emissions.DPMixture` emission, NaN for other
        families), and the distribution arguments of every other site (all but beta, trans and
        ``probed``; with ``emission_probe`` also leaving out the mixture-weights site and the
        mixture's concentration, the two places ``sigma`` legitimately enters)."""
        from numpyro_hdphmm.emissions.dp_mixture import DPMixture

        sites = self._sites
        tr = handlers.trace(
            handlers.substitute(handlers.seed(conditioned(self._inference_model), 0), data=values)
        ).get_trace(*model_args, **model_kwargs)
        emission = tr[sites.obs]["fn"].emission
        is_dp = isinstance(emission, DPMixture)
        sigma = emission.concentration if is_dp else np.nan
        hyper = (tr[sites.beta]["fn"].concentration, tr[sites.trans]["fn"].alpha, tr[sites.trans]["fn"].kappa, sigma)
        skip = {sites.beta, sites.trans, *probed}
        if emission_probe and is_dp:
            skip.add(sites.emission[sites.param_names.index("weights")])
        others = []
        for site_name, site in tr.items():
            if site["type"] != "sample" or site_name in skip:
                continue
            fn = site["fn"]
            if emission_probe and is_dp and site_name == sites.obs:
                others.extend(jax.tree_util.tree_leaves((fn.emission.base, fn.params, fn.states, fn.lengths)))
            else:
                others.extend(jax.tree_util.tree_leaves(fn))
        return hyper, others

    def _recognize(self, model_trace, latent, model_args, model_kwargs) -> HyperUpdates:
        """Find hyperparameter sites with exact auxiliary-variable updates (numerical probes)."""
        if not self._exact_hyper:
            return HyperUpdates()
        sites = self._sites
        owned = {sites.beta, sites.trans, sites.states, *sites.emission}
        candidates = {}
        for s in latent:
            if s in owned:
                continue
            site = model_trace[s]
            fn = _unwrap(site["fn"])
            if _is_scalar_site(site, dist.Gamma) and _is_constant(fn.concentration) and _is_constant(fn.rate):
                candidates[s] = "gamma"
            elif _is_scalar_site(site, dist.Beta) and _is_constant(fn.concentration1) and _is_constant(fn.concentration0):
                candidates[s] = "beta"
        if not candidates:
            return HyperUpdates()
        rng = np.random.default_rng(12345)
        probes, results = [], []
        with jax.ensure_compile_time_eval():
            # a concrete prototype (the kernel's own trace may hold tracers under vmap/pmap)
            concrete = _prior_trace(conditioned(self._inference_model), jax.random.key(0), model_args, model_kwargs)
            fixed = {s: concrete[s]["value"] for s in latent if s not in candidates}
            for _ in range(3):
                probe = {
                    s: jnp.asarray(rng.gamma(2.0, 1.0) if kind == "gamma" else rng.uniform(0.05, 0.95), dtype=jnp.result_type(float))
                    for s, kind in candidates.items()
                }
                try:
                    hyper, _ = self._hyper_values(model_args, model_kwargs, {**fixed, **probe})
                except Exception:  # a probe outside the model's support: give up recognition
                    return HyperUpdates()
                if not all(_is_constant(h) for h in hyper):
                    return HyperUpdates()
                probes.append(probe)
                results.append([np.asarray(h) for h in hyper])

        def matches(index, site, transform=lambda g, a, k, s: (g, a, k, s)):
            return all(_close(transform(*res)[index], pr[site]) for res, pr in zip(results, probes))

        def feeds_nothing_else(site_names, emission_probe=False):
            """Changing only these sites leaves every other site's distribution unchanged (for the
            emission concentration: also gamma, alpha and kappa)."""
            base = {**fixed, **probes[0]}
            alt = dict(base)
            for s in site_names:
                alt[s] = probes[1][s]
            with jax.ensure_compile_time_eval():
                ha, a = self._hyper_values(model_args, model_kwargs, base, site_names, emission_probe)
                hb, b = self._hyper_values(model_args, model_kwargs, alt, site_names, emission_probe)
            if emission_probe:
                a, b = [*a, *ha[:3]], [*b, *hb[:3]]
            if len(a) != len(b) or not all(_is_constant(x) and _is_constant(y) for x, y in zip(a, b)):
                return False
            return all(np.shape(x) == np.shape(y) and _close(x, y) for x, y in zip(a, b))

        gammas = [s for s, k in candidates.items() if k == "gamma"]
        betas = [s for s, k in candidates.items() if k == "beta"]
        gamma_site = next((s for s in gammas if matches(0, s) and feeds_nothing_else([s])), None)
        const = lambda i: all(_close(results[0][i], r[i]) for r in results)
        alpha_site = next((s for s in gammas if s != gamma_site and matches(1, s)), None)
        kappa_site = next((s for s in gammas if s not in (gamma_site, alpha_site) and matches(2, s)), None)
        # only kernels that pass the prior to the emission's update (class attribute
        # ``updates_emission_concentration = True``) own the site; elsewhere the inner kernel updates it
        sigma_site = next(
            (s for s in gammas if getattr(type(self), "updates_emission_concentration", False)
             and s not in (gamma_site, alpha_site, kappa_site) and matches(3, s)
             and feeds_nothing_else([s], emission_probe=True)),
            None,
        )
        hyper = HyperUpdates(gamma=gamma_site, emission_concentration=sigma_site)
        a_ok = alpha_site is not None or const(1)
        k_ok = kappa_site is not None or const(2)
        pair = [s for s in (alpha_site, kappa_site) if s is not None]
        if a_ok and k_ok and pair and feeds_nothing_else(pair):
            return hyper._replace(concentration="independent", alpha=alpha_site, kappa=kappa_site)
        c_site = next(
            (s for s in gammas if s not in (gamma_site, sigma_site) and matches(1, s, lambda g, a, k, _: (g, a + k, k, _))),
            None,
        )
        rho_site = next(
            (s for s in betas if matches(2, s, lambda g, a, k, _: (g, a, k / (a + k), _))), None
        )
        if c_site is not None and rho_site is not None and feeds_nothing_else([c_site, rho_site]):
            return hyper._replace(concentration="c_rho", c=c_site, rho=rho_site)
        return hyper

    def _check_inner_supports(self, latent, model_args, model_kwargs) -> None:
        """Reject inner-kernel sites whose support lets the model become invalid.

        The inner NUTS kernel moves each of its sites over the whole support of the site's
        distribution.  A hyperprior on the real line (``gamma ~ Normal(3, 1)``) then reaches
        negative concentrations, where the HDP-HMM is undefined (NaN rows and densities).  Each
        inner site is evaluated at points spread over its support (the support's bijection at
        unconstrained values -10, -1, 1, 10, the other sites at a prior draw); a model that
        rejects one of them (a ``ValueError``, e.g. a non-positive ``gamma``, ``alpha``, ``kappa``
        or emission concentration) is reported, naming the site, before anything is compiled.
        """
        if not self._inner_sites:
            return
        from numpyro.distributions.transforms import biject_to

        with jax.ensure_compile_time_eval():
            concrete = _prior_trace(conditioned(self._inference_model), jax.random.key(0), model_args, model_kwargs)
            fixed = {s: concrete[s]["value"] for s in latent}
            for site in self._inner_sites:
                support = concrete[site]["fn"].support
                if support.is_discrete:
                    continue
                shape = jnp.shape(concrete[site]["value"])
                transform = biject_to(support)
                unconstrained_shape = transform.inverse_shape(shape)
                for u in (-10.0, -1.0, 1.0, 10.0):
                    value = transform(jnp.full(unconstrained_shape, u, jnp.result_type(float)))
                    try:
                        self._hyper_values(model_args, model_kwargs, {**fixed, site: value})
                    except ValueError as err:
                        raise ValueError(
                            f"{type(self).__name__}: the inner NUTS kernel moves site '{site}' over its whole support "
                            f"({support}), but the model is invalid at {site} = {np.asarray(value).ravel()[:3]}: {err} "
                            f"Give '{site}' a prior on the values the model accepts (for a concentration: Gamma, "
                            "LogNormal or HalfNormal) or transform it (e.g. jnp.exp of a real-valued site)."
                        ) from err

    # ------------------------------------------------------------------ model view
    def _view(self, model_args, model_kwargs, z) -> ModelView:
        """Run the model at ``z`` and read hyperparameters, the emission family and the data."""
        sites = self._sites
        tr = handlers.trace(handlers.substitute(handlers.seed(self._inference_model, 0), data=z)).get_trace(
            *model_args, **model_kwargs
        )
        obs_fn: EmissionLikelihood = tr[sites.obs]["fn"]
        emission = obs_fn.emission
        y = jnp.asarray(tr[sites.obs]["value"])
        if not sites.batched:
            y = y[None]
        x, valid = jax.vmap(emission.prepare)(y)
        num_seq, num_steps = valid.shape
        lengths = obs_fn.lengths if obs_fn.lengths is not None else jnp.full((num_seq,), num_steps, jnp.int32)
        valid = valid & (jnp.arange(num_steps) < lengths[:, None])
        priors = {s: _unwrap(tr[s]["fn"]) for s in self._hyper.sites}
        return ModelView(
            gamma=tr[sites.beta]["fn"].concentration,
            alpha=tr[sites.trans]["fn"].alpha,
            kappa=tr[sites.trans]["fn"].kappa,
            emission=emission,
            y=y,
            x=x,
            valid=valid,
            lengths=lengths,
            priors=priors,
        )

    # ------------------------------------------------------------------ init / sample
    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        if not is_prng_key(rng_key):  # vectorized chains: a batch of keys
            init_one = lambda key, params: self._init_one(key, num_warmup, params, model_args, model_kwargs)
            # compiled as one program: run eagerly, every (batched) operation would be compiled on
            # its own (hundreds of small compilations)
            state = jax.jit(jax.vmap(init_one))(rng_key, init_params)
            self._sample_fn = jax.vmap(self._sample_one, in_axes=(0, None, None))
            return state
        init_one = lambda key, params: self._init_one(key, num_warmup, params, model_args, model_kwargs)
        state = jax.jit(init_one)(rng_key, init_params)
        self._sample_fn = self._sample_one
        return state

    def sample(self, state, model_args, model_kwargs):
        state = self._sample_fn(state, model_args, {} if model_kwargs is None else model_kwargs)
        host_warning(_warn_overflow, state.overflow, self._sites.num_states, type(self).__name__)
        return state

    def _init_one(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        key_trace, key_own, key_inner, key_state = random.split(rng_key, 4)
        model_trace = _prior_trace(conditioned(self._inference_model), key_trace, model_args, model_kwargs)
        self._sites = self._discover(model_trace)
        latent = latent_sample_sites(model_trace)
        self._hyper = self._recognize(model_trace, latent, model_args, model_kwargs)
        owned = {self._sites.beta, self._sites.trans, self._sites.states, *self._sites.emission}
        self._inner_sites = tuple(s for s in latent if s not in owned and s not in self._hyper.sites)
        self._check_supported(model_trace)
        self._check_inner_supports(latent, model_args, model_kwargs)
        _check_capacity(self._sites.num_states, type(self).__name__)
        z = {s: model_trace[s]["value"] for s in latent}
        if init_params:
            z.update({k: jnp.asarray(v) for k, v in init_params.items() if k in z})
        view = self._view(model_args, model_kwargs, z)
        owned_init, aux = self._init_owned(key_own, z, view, init_params or {})
        z.update(owned_init)
        inner_state = None
        if self._inner_sites:
            self._inner = self._make_inner()
            cond = {k: v for k, v in z.items() if k not in self._inner_sites}
            kwargs_c = with_conditioning(model_kwargs, cond)
            params = None
            inner_state = self._inner.init(key_inner, num_warmup, params, model_args, kwargs_c)
            inner_z = self._inner.get_constrain_fn(model_args, kwargs_c)(inner_state.z)
            z.update({k: inner_z[k] for k in self._inner_sites})
        return self._state(z, model_args, model_kwargs, jnp.zeros((), bool), jnp.ones((), jnp.result_type(float)),
                           jnp.zeros((), bool), aux, inner_state, key_state)

    def _log_joint(self, z, model_args, model_kwargs):
        """``log p(z, y)`` of the model.  Outside any trace and for large data (the kernel's
        initialization) it is compiled, so that XLA fuses the ``(T, K)`` temporaries that an
        eager evaluation would hold at once; small problems are evaluated eagerly (no compile)."""
        leaves, treedef = jax.tree_util.tree_flatten((model_args, model_kwargs))
        is_array = [isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves]
        size = sum(int(np.size(leaf)) for leaf, a in zip(leaves, is_array) if a)
        if size < _COMPILE_LOG_JOINT_SIZE or not all(_is_constant(v) for v in jax.tree_util.tree_leaves(z)):
            return log_density(self._inference_model, model_args, model_kwargs, z)[0]

        def log_joint(z, arrays):
            it = iter(arrays)
            full = [next(it) if a else leaf for leaf, a in zip(leaves, is_array)]
            args, kwargs = jax.tree_util.tree_unflatten(treedef, full)
            return log_density(self._inference_model, args, kwargs, z)[0]

        return jax.jit(log_joint)(z, [leaf for leaf, a in zip(leaves, is_array) if a])

    def _state(self, z, model_args, model_kwargs, overflow, accept_prob, diverging, aux, inner_state, rng_key):
        """Assemble an :class:`HDPState`, computing ``lp`` and ``num_states`` from ``z``."""
        lp = self._log_joint(z, model_args, model_kwargs)
        return HDPState(
            z=z,
            num_states=_num_used(z[self._sites.states], self._sites.num_states),
            lp=lp,
            overflow=overflow,
            accept_prob=accept_prob,
            diverging=diverging,
            aux=aux,
            inner_state=inner_state,
            rng_key=rng_key,
        )

    def _make_inner(self):
        inner_model = conditioned(_CollapseRows(self._inference_model))
        if self._inner_proto is None:
            return NUTS(inner_model)
        return self._inner_proto.wrap_model(lambda m: inner_model)

    def _redraw_rows(self, rng_key, z, model_args, model_kwargs):
        """The rows from ``Dir(alpha beta + kappa e_j + n_j.)`` at the values after the inner
        kernel's update (which saw them integrated out, see :class:`_CollapseRows`)."""
        sites = self._sites
        view = self._view(model_args, model_kwargs, z)
        states = z[sites.states] if sites.batched else z[sites.states][None]
        beta = z[sites.beta]
        n, first = crp.transition_counts(states, sites.num_states, view.lengths)
        conc = row_concentrations(beta, jnp.asarray(view.alpha, beta.dtype), jnp.asarray(view.kappa, beta.dtype), n, first)
        return {**z, sites.trans: sample_dirichlet(rng_key, conc).astype(z[sites.trans].dtype)}

    def _sample_one(self, state: HDPState, model_args, model_kwargs) -> HDPState:
        key_sweep, key_next = random.split(state.rng_key)
        view = self._view(model_args, model_kwargs, state.z)
        owned, hyper_vals, aux, overflow = self._sweep(key_sweep, state, view)
        z = {**state.z, **owned, **hyper_vals}
        z = {k: jnp.asarray(v, state.z[k].dtype) for k, v in z.items()}
        inner_state = state.inner_state
        accept_prob, diverging = state.accept_prob, state.diverging
        if self._inner is not None:
            cond = {k: v for k, v in z.items() if k not in self._inner_sites}
            kwargs_c = with_conditioning(model_kwargs, cond)
            inner_state = self._inner.refresh(inner_state, model_args, kwargs_c)
            inner_state = self._inner.sample(inner_state, model_args, kwargs_c)
            inner_z = self._inner.get_constrain_fn(model_args, kwargs_c)(inner_state.z)
            z.update({k: inner_z[k] for k in self._inner_sites})
            accept_prob = jnp.asarray(getattr(inner_state, "accept_prob", accept_prob), accept_prob.dtype)
            diverging = jnp.asarray(getattr(inner_state, "diverging", diverging), bool)
            z = self._redraw_rows(random.fold_in(key_sweep, 1), z, model_args, model_kwargs)
        return self._state(z, model_args, model_kwargs, overflow, accept_prob, diverging, aux, inner_state, key_next)

    # ------------------------------------------------------------------ shared updates
    def _prior_params(self, view: ModelView, site: str):
        fn = view.priors[site]
        if isinstance(fn, dist.Gamma):
            return fn.concentration, fn.rate
        return fn.concentration1, fn.concentration0

    def _exact_hyper_updates(self, rng_key, view: ModelView, tables, n, first, gamma_update):
        """Exact auxiliary-variable updates of the recognized hyperparameter sites.

        ``tables``: :class:`~numpyro_hdphmm._core.crp.TableCounts` drawn at the current values;
        ``gamma_update(key, gamma, shape, rate) -> gamma`` is the algorithm's update of ``gamma``
        (weak-limit or infinite form).  Returns ``(gamma, alpha, kappa, {site: value})``.
        """
        h = self._hyper
        k_conc, k_gamma = random.split(rng_key)
        gamma, alpha, kappa = view.gamma, view.alpha, view.kappa
        if h.concentration == "independent":
            alpha, kappa = crp.resample_alpha_kappa(
                k_conc, alpha, kappa, tables, n, first,
                None if h.alpha is None else self._prior_params(view, h.alpha),
                None if h.kappa is None else self._prior_params(view, h.kappa),
            )
        elif h.concentration == "c_rho":
            alpha, kappa = crp.resample_c_rho(
                k_conc, alpha, kappa, tables, n, first,
                self._prior_params(view, h.c), self._prior_params(view, h.rho),
            )
        if h.gamma is not None:
            gamma = gamma_update(k_gamma, gamma, *self._prior_params(view, h.gamma))
        values = {}
        for site, value in ((h.gamma, gamma), (h.alpha, alpha), (h.kappa, kappa), (h.c, alpha + kappa), (h.rho, kappa / (alpha + kappa))):
            if site is not None:
                values[site] = jnp.asarray(value, jnp.result_type(float))
        return gamma, alpha, kappa, values

    # ------------------------------------------------------------------ subclass API
    def _check_supported(self, model_trace) -> None:
        """Raise ``NotImplementedError`` for models the algorithm cannot sample."""

    def _init_owned(self, rng_key, z, view: ModelView, init_params) -> Tuple[Dict[str, jax.Array], Any]:
        """Initial values of the owned sites and the auxiliary state."""
        raise NotImplementedError

    def _sweep(self, rng_key, state: HDPState, view: ModelView):
        """One sweep: returns ``(owned values, exact hyperparameter values, aux, overflow)``."""
        raise NotImplementedError
