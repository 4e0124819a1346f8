"""ArviZ conversion that works with both ArviZ generations.

``to_inference_data(mcmc)`` returns what the installed ArviZ calls its data container:

* ArviZ 0.x (package ``arviz < 1``): ``arviz.from_numpyro(mcmc, ...)``, an ``InferenceData``;
* ArviZ 1.x (package ``arviz-base``, imported as ``arviz_base``, which ``arviz >= 1`` re-exports):
  ``arviz_base.from_numpyro(mcmc, ...)``, an ``xarray.DataTree``.

Both are called with the MCMC object and the same keywords (``log_likelihood``, ``coords``,
``dims``, ``posterior_predictive``, ``prior``, ...).  Either way the groups are the same:
``posterior`` (the model's sites, ``{name}_states`` over the ``"time"`` dimension that
:func:`numpyro_hdphmm.sample` names, the state-indexed sites over ``state`` / ``from_state`` /
``to_state``, ``{name}_num_states``; optionally relabelled), ``sample_stats`` (``lp``,
``num_states``, ``overflow``, ``diverging``, ...), pointwise ``log_likelihood`` (one term per
OBSERVED step, conditional on the sampled states or with the states summed out; see
:func:`to_inference_data`) and ``observed_data``.  ArviZ is imported only when this function is
called: the package itself does not need it.
"""

from __future__ import annotations

import importlib
from typing import Optional, Sequence

import numpy as np

from numpyro_hdphmm._core.roles import MODEL_KEY
from numpyro_hdphmm.results.labels import MIN_SHARE, find_state_sites, kept_states, relabel_samples, state_shares
from numpyro_hdphmm.results.posterior import as_sequences, marginal_log_likelihood

__all__ = ["to_inference_data"]

_BACKENDS = ("arviz", "arviz_base")


def _major_version(module) -> int:
    try:
        return int(str(getattr(module, "__version__", "0")).split(".")[0])
    except ValueError:
        return 0


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _resolve_backend(backend):
    """``(module_name, from_numpyro)`` of the backend to use."""
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(f"`backend` must be None, 'arviz' (ArviZ 0.x) or 'arviz_base' (ArviZ 1.x), got {backend!r}.")
    if backend in (None, "arviz"):
        az = _import("arviz")
        if az is not None and _major_version(az) < 1:
            return "arviz", az.from_numpyro
        if backend == "arviz":
            if az is None:
                raise ImportError("to_inference_data(backend='arviz') needs ArviZ 0.x: pip install 'arviz<1'.")
            # arviz >= 1 is a meta-package over arviz_base: fall through to it
    base = _import("arviz_base")
    if base is not None:
        return "arviz_base", base.from_numpyro
    raise ImportError(
        "to_inference_data needs ArviZ: install ArviZ 0.x (pip install 'arviz<1', returns InferenceData) "
        "or ArviZ 1.x (pip install arviz-base, returns xarray.DataTree)."
    )


def _hdp_name(samples, name):
    """The HDP-HMM's name in ``samples`` (``{name}_trans`` and ``{name}_beta`` present), or None."""
    if name is not None:
        if f"{name}_trans" not in samples:
            raise ValueError(f"`name`: the samples have no '{name}_trans' (found {sorted(samples)}).")
        return name
    found = sorted(k[: -len("_trans")] for k in samples if k.endswith("_trans") and k[: -len("_trans")] + "_beta" in samples)
    if len(found) > 1:
        raise ValueError(f"the samples hold several HDP-HMMs {found}: pass `name=`.")
    return found[0] if found else None


def _trace(model, draw, model_args, model_kwargs):
    from numpyro import handlers

    return handlers.trace(handlers.seed(handlers.substitute(model, data=draw), rng_seed=0)).get_trace(
        *model_args, **model_kwargs
    )


def _plate_dims(trace):
    """Dimension names from plates and ``infer["event_dims"]`` (what ``from_numpyro`` infers
    itself, and stops inferring once ``dims`` is given)."""
    dims = {}
    for site_name, site in trace.items():
        batch = [frame.name for frame in sorted(site["cond_indep_stack"], key=lambda f: f.dim)]
        event = list((site.get("infer") or {}).get("event_dims", []))
        if site["type"] in ("sample", "deterministic") and (batch or event):
            dims[site_name] = batch + event
    return dims


def _state_dims(sites):
    dims = {sites.trans: ["from_state", "to_state"], **{p: ["state"] for p in sites.params}}
    if sites.beta is not None:
        dims[sites.beta] = ["to_state"]
    k = sites.num_states
    coords = {"state": np.arange(k), "from_state": np.arange(k + 1), "to_state": np.arange(k + 1)}
    return dims, coords


def _group(data, group):
    if hasattr(data, "children"):  # xarray.DataTree (ArviZ 1.x)
        return data[group].to_dataset() if group in data.children else None
    return getattr(data, group, None) if group in data.groups() else None


def _set_group(data, group, dataset):
    if hasattr(data, "children"):
        import xarray as xr

        data[group] = xr.DataTree(dataset)
    elif group in data.groups():
        setattr(data, group, dataset)  # keeps the group's place
    else:
        data.add_groups({group: dataset})


def _observed_steps(emission, y, lengths):
    """``([N,] T)`` bool: the steps of the observed site that carry an observation."""
    import jax

    y3, lengths, several = as_sequences(emission, y, lengths, "obs")
    valid = np.asarray(jax.vmap(emission.prepare)(y3)[1]) & (np.arange(y3.shape[1])[None] < np.asarray(lengths)[:, None])
    return valid if several else valid[0]


def _observed_only(values, observed, template):
    """The pointwise log-likelihood ``values (C, D, [N,] T)`` at the observed steps only, as a
    DataArray: dims ``(chain, draw, [sequence,] time)`` when every step is observed, ``(chain,
    draw, time)`` with the observed steps as ``time`` coordinates for one sequence, else
    ``(chain, draw, observation)`` with ``sequence`` and ``time`` coordinates per observation."""
    import xarray as xr

    values = np.asarray(values)
    chain_draw = {d: template[d].values for d in ("chain", "draw") if d in template.coords} or {
        "chain": np.arange(values.shape[0]), "draw": np.arange(values.shape[1])}
    several = observed.ndim == 2
    if observed.all():
        dims = ("chain", "draw") + (("sequence", "time") if several else ("time",))
        coords = {**chain_draw, **{d: np.arange(n) for d, n in zip(dims[2:], values.shape[2:])}}
        return xr.DataArray(values, dims=dims, coords=coords)
    if not several:
        keep = np.flatnonzero(observed)
        return xr.DataArray(values[:, :, keep], dims=("chain", "draw", "time"), coords={**chain_draw, "time": keep})
    seq, time = np.nonzero(observed)
    return xr.DataArray(
        values[:, :, seq, time], dims=("chain", "draw", "observation"),
        coords={**chain_draw, "observation": np.arange(seq.size), "sequence": ("observation", seq),
                "time": ("observation", time)},
    )


def _add_effective_states(data, samples, sites, name, lengths):
    """``{name}_effective_states`` (states holding >= 1% of the steps) in ``posterior`` and
    ``effective_states`` in ``sample_stats``, beside the raw ``num_states``."""
    states = np.asarray(samples[sites.states])
    lead = states.shape[:2]
    shares = state_shares(states.reshape((-1,) + states.shape[2:]), sites.num_states, lengths=lengths)
    count = np.sum(shares >= MIN_SHARE, axis=1).reshape(lead)
    for group, key in (("posterior", f"{name}_effective_states"), ("sample_stats", "effective_states")):
        dataset = _group(data, group)
        if dataset is not None:
            _set_group(data, group, dataset.assign({key: (("chain", "draw"), count)}))


def to_inference_data(mcmc, *, backend=None, log_likelihood="marginal", relabel=False, name: Optional[str] = None,
                      extra_sites: Sequence[str] = (), **kwargs):
    r"""Convert a finished :class:`numpyro.infer.MCMC` run of an HDP-HMM model for ArviZ.

    On top of ``from_numpyro``:

    * **state coordinates**: the state-indexed sites get named dimensions, ``state`` (``0..K-1``)
      for the emission parameters' leading axis, ``from_state`` x ``to_state`` (``0..K``) for
      ``{name}_trans`` (``from_state = K`` is the start row, ``to_state = K`` the mass of the
      states not represented) and ``to_state`` for ``{name}_beta`` (``beta_K`` that mass);
      ``dims``/``coords`` passed by the caller take precedence.
    * **relabelling**: ``relabel=True`` stores the posterior relabelled by
      :func:`numpyro_hdphmm.relabel_samples` (Stephens' algorithm), ``relabel=labels`` by
      Hungarian matching to a reference labelling, so that per-state summaries (``az.summary``,
      R-hat) compare the same state across draws and chains; the state axes then hold only the
      states :func:`numpyro_hdphmm.results.labels.summary` shows (:func:`numpyro_hdphmm.results.labels.kept_states`:
      at least 1% of the steps in at least half of the draws; ``{name}_trans`` keeps their rows
      and columns and the start row / remainder column ``K``; the labels are in the posterior's
      ``kept_states`` attribute), so ``az.summary`` has no rows of empty slots holding prior
      draws.  The full relabelled draws: :func:`numpyro_hdphmm.relabel_samples`.
    * **number of states**: ``{name}_effective_states`` (posterior) and ``effective_states``
      (sample_stats), the states holding at least 1% of the steps
      (:func:`numpyro_hdphmm.results.labels.effective_num_states`), beside the raw ``num_states``.
    * **pointwise log-likelihood**, one term per OBSERVED step: missing (NaN) and padded steps are
      removed from the ``log_likelihood`` group (they are not observations; counting them with
      log-likelihood 0 would inflate ``n`` and give Pareto k = inf).  Dims ``(chain, draw,
      [sequence,] time)`` when every step is observed, ``(chain, draw, time)`` over the observed
      steps of one sequence, else ``(chain, draw, observation)`` with ``sequence`` and ``time``
      coordinates.  Which log-likelihood:

      - ``"marginal"`` or ``True`` (the default, what ``az.loo``/``az.compare`` see): the states
        summed out, ``log p(y_t | y_{<t}, pi, theta)`` per draw, the forward filter's one-step-ahead
        normalizers (:func:`numpyro_hdphmm.marginal_log_likelihood`; their sum is the marginal
        likelihood ``log p(y | pi, theta)``).  This is the one to compare HMMs (sticky vs.
        non-sticky, finite vs. nonparametric) with ``az.loo``/``az.compare``.  The terms are
        one-step-ahead predictives, not conditionally independent given the parameters, so
        PSIS-LOO on them is leave-future-out in spirit: each step is predicted from its past,
        with the parameters fitted to the rest.  It costs one forward filter per draw.
      - ``"conditional"``: NumPyro's ``log f(y_t | theta_{z_t})`` at each draw's SAMPLED states,
        i.e. conditional on the state path, which was itself fitted to ``y_t`` (what
        ``az.from_numpyro(mcmc)`` computes, there with the padded steps counted too).  It
        measures the fit given the segmentation; PSIS-LOO on it is optimistic and models with
        different state structures are not compared on the same footing (the sticky versus
        non-sticky ranking can flip).
      - ``False``: no log-likelihood group.

      For an HDP-SLDS (:class:`numpyro_hdphmm.HDPSLDS`) ``"marginal"`` raises
      ``NotImplementedError`` (its ``log p(y | theta)``, with the modes and the latent path
      integrated out, has no closed form): pass ``"conditional"``, the Gaussian of each step's
      observed dimensions given the draw's latent path.

    Args:
        mcmc: the MCMC object after ``run`` (any kernel of :mod:`numpyro_hdphmm.infer`, or a
            :class:`numpyro.infer.Gibbs` containing one).  The model and its arguments are read
            as ArviZ reads them (``mcmc.sampler.model``, ``mcmc._args``, ``mcmc._kwargs``).
        backend: ``None`` (default: ArviZ 0.x when ``arviz < 1`` is installed, else
            ``arviz_base``), ``"arviz"`` or ``"arviz_base"``.
        log_likelihood: ``"marginal"``/``True`` (default), ``"conditional"`` or ``False`` (above),
            with both backends (ArviZ 1.x's own default is ``False``).  A model without an
            HDP-HMM of :func:`numpyro_hdphmm.sample` gets ``from_numpyro``'s log-likelihood of its
            observed sites (unless ``False``).
        relabel: ``False``, ``True`` or a reference labelling (above).
        name: the HDP-HMM's name (default: found from the samples).
        extra_sites: the user's own state-indexed sites (custom emissions), for ``relabel``.
        **kwargs: passed to ``from_numpyro`` (``coords``, ``dims``, ``posterior_predictive``,
            ``prior``, ``predictions``, ``constant_data``, ...).

    Returns:
        ``arviz.InferenceData`` (ArviZ 0.x) or ``xarray.DataTree`` (ArviZ 1.x).

    Raises:
        ImportError: when neither ArviZ 0.x nor ``arviz_base`` is installed.
        ValueError: on an unknown ``log_likelihood``.
        NotImplementedError: ``log_likelihood="marginal"`` (the default) for an HDP-SLDS.
    """
    _, from_numpyro = _resolve_backend(backend)
    if log_likelihood not in (True, False, "conditional", "marginal"):
        raise ValueError(f"`log_likelihood` must be True, False, 'conditional' or 'marginal', got {log_likelihood!r}.")
    conditional = log_likelihood == "conditional"
    samples = mcmc.get_samples(group_by_chain=True)
    name = _hdp_name(samples, name)
    if name is None:
        if relabel is not False:
            raise ValueError(
                "`relabel` needs an HDP-HMM declared with numpyro_hdphmm.sample; the "
                f"samples hold none (no '<name>_trans' with '<name>_beta' among {sorted(samples)})."
            )
        return from_numpyro(mcmc, log_likelihood=log_likelihood is not False, **kwargs)

    model, model_args, model_kwargs = mcmc.sampler.model, tuple(mcmc._args), dict(mcmc._kwargs)
    trace = _trace(model, {k: v[0, 0] for k, v in samples.items()}, model_args, model_kwargs)
    obs_site = trace[name]
    kind = getattr((obs_site.get("infer") or {}).get(MODEL_KEY), "kind", "hmm")
    if kind == "slds" and log_likelihood in (True, "marginal") and obs_site["is_observed"]:
        raise NotImplementedError(
            f"to_inference_data(log_likelihood={log_likelihood!r}) (the default is 'marginal'): the model's "
            f"{name!r} is an HDP-SLDS, whose marginal likelihood log p(y | theta) sums over every mode path with the latent path "
            "integrated out for each and has no closed form (exponential in T), so nh.marginal_log_likelihood does "
            "not compute it. Pass log_likelihood='conditional' (log N(y_t | C x_t + d, R) given each draw's latent "
            "path, one term per observed step; what az.from_numpyro(mcmc) computes) or log_likelihood=False."
        )
    sites = find_state_sites(samples, name, extra_sites)
    state_dims, state_coords = _state_dims(sites)
    dims = {**_plate_dims(trace), **state_dims, **(kwargs.pop("dims", None) or {})}
    coords = {**state_coords, **(kwargs.pop("coords", None) or {})}
    data = from_numpyro(mcmc, log_likelihood=conditional, dims=dims, coords=coords, **kwargs)

    lengths = obs_site["fn"].lengths
    if sites.states is not None and sites.states in samples:
        _add_effective_states(data, samples, sites, name, lengths)
    if relabel is not False:
        reference = None if relabel is True else relabel
        new = relabel_samples(samples, reference, name=name, lengths=lengths, extra_sites=extra_sites)
        posterior = _group(data, "posterior")
        changed = [sites.trans, sites.states, sites.beta, *sites.params, *extra_sites]
        posterior = posterior.assign(
            {k: (posterior[k].dims, np.asarray(new[k])) for k in changed if k is not None and k in posterior}
        )
        # the states nh.labels.summary shows: empty slots (prior draws) left out of the state axes
        states = np.asarray(new[sites.states])
        kept = kept_states(states.reshape((-1,) + states.shape[2:]), sites.num_states, lengths=lengths)
        rows = np.append(kept, sites.num_states)
        posterior = posterior.isel(state=kept, from_state=rows, to_state=rows, missing_dims="ignore")
        posterior.attrs["kept_states"] = kept.tolist()
        _set_group(data, "posterior", posterior)

    if log_likelihood is False or not obs_site["is_observed"]:
        return data
    if conditional:
        group = _group(data, "log_likelihood")
        values = group[name].values
        fn = obs_site["fn"]  # an HDP-SLDS's observed site carries its observation model, not an emission family
        observed = _observed_steps(getattr(fn, "observation", None) or fn.emission, obs_site["value"], lengths)
    else:
        group = _group(data, "log_likelihood")
        res = marginal_log_likelihood(model, samples, name=name, model_args=model_args, model_kwargs=model_kwargs)
        values, observed = res.pointwise, np.asarray(res.observed)
    template = _group(data, "posterior")
    pointwise = _observed_only(values, observed, template)
    if group is None:
        import xarray as xr

        group = xr.Dataset(attrs=dict(template.attrs))
    else:
        group = group.drop_vars(name)
        group = group.drop_vars([c for c in ("sequence", "time") if c in group.coords and not any(
            c in v.dims for v in group.data_vars.values())])
    _set_group(data, "log_likelihood", group.assign({name: pointwise}))
    return data
