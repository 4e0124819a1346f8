"""
Alice in Wonderland: states as word classes
===========================================

*Alice's Adventures in Wonderland* (Carroll 1865) as a sequence of words, prepared as in the
restricted-collapsed-draw paper (lower case, punctuation removed, ``EOS`` after every sentence,
words seen once replaced by ``UNK``: 28,103 tokens, 1,487 word types;
:func:`numpyro_hdphmm.datasets.load_alice`).  An HMM over words with categorical emissions
learns states that behave like word classes: a state emits a set of words that occur in the
same contexts (determiners, nouns after them, verbs of speech, sentence ends, ...).

The model: the HDP-HMM with categorical emissions and a symmetric Dirichlet prior
(:class:`numpyro_hdphmm.emissions.Categorical`), Gamma hyperpriors with exact updates, sampled
by :class:`~numpyro_hdphmm.infer.WeakLimitGibbs` (blocked FFBS over the whole text per sweep).
The last 1,000 words are held out, as in the paper, and scored by the predictive perplexity
(:func:`numpyro_hdphmm.results.diagnostics.predictive_log_likelihood`).
"""

import os

import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs
NUM_WARMUP, NUM_SAMPLES, MAX_STATES = (5, 5, 20) if QUICK else (300, 100, 40)

alice = nh.datasets.load_alice()
tokens, vocabulary = alice.tokens, alice.vocabulary
num_test = alice.info["num_test"]
train, test = tokens[:-num_test], tokens[-num_test:]
if QUICK:
    train = train[:5000]
V = len(vocabulary)
print(f"{len(tokens)} tokens, {V} word types; training on {len(train)}, testing on {len(test)}")
print("most frequent:", ", ".join(vocabulary[:15]))

# %%
# Model and fit
# -------------

emission = nh.emissions.Categorical(V, concentration=0.1)


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
    hmm = nh.HDPHMM(gamma=gamma, alpha=alpha, emission=emission, max_states=MAX_STATES)
    nh.sample("y", hmm, obs=y)


mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=NUM_WARMUP, num_samples=NUM_SAMPLES, num_chains=1,
            progress_bar=False)
mcmc.run(jax.random.key(0), train, extra_fields=("num_states",))
samples = mcmc.get_samples()
print("states in use over the kept sweeps:", np.asarray(mcmc.get_extra_fields()["num_states"])[[0, -1]].tolist())

# %%
# Top words per state
# -------------------
# For each state of the last draw (by decreasing size), the words it emitted most often, with
# how many of its tokens they are.  Ranking by the sampled emission probabilities gives the
# same picture.

z = np.asarray(samples["y_states"][-1])
sizes = np.bincount(z, minlength=MAX_STATES)
for k in np.argsort(-sizes):
    if sizes[k] < 0.005 * len(train):
        break
    counts = np.bincount(train[z == k], minlength=V)
    top = np.argsort(-counts)[:10]
    print(f"state {k:2d} ({sizes[k] / len(train):5.1%} of tokens): "
          + " ".join(f"{vocabulary[w]}" for w in top))

# %%
# The transitions between the largest states (rows: from, columns: to), from the last draw.

big = np.argsort(-sizes)[:12]
trans = np.asarray(samples["y_trans"][-1])[big][:, big]
fig, ax = plt.subplots(figsize=(6, 5))
im = ax.imshow(trans, cmap="Blues", vmin=0)
labels = [f"{k}: {vocabulary[np.argmax(np.bincount(train[z == k], minlength=V))]}" for k in big]
ax.set_xticks(range(len(big)), labels, rotation=90, fontsize=7)
ax.set_yticks(range(len(big)), labels, fontsize=7)
ax.set_title("transition probabilities (state: its most frequent word)")
fig.colorbar(im)
fig.tight_layout()

# %%
# Held-out perplexity
# -------------------
# ``exp(-log p(test | train) / 1000)``, the per-word perplexity of the RCD paper (eqs. 38-39),
# estimated from the kept draws (lower is better; a unigram model of the training words is
# the baseline).

ll = nh.diagnostics.predictive_log_likelihood(samples, emission, test)
unigram = np.bincount(train, minlength=V) + 0.1
unigram_perplexity = np.exp(-np.mean(np.log(unigram[test] / unigram.sum())))
print(f"held-out perplexity: HDP-HMM {float(ll.perplexity):.1f}, unigram {unigram_perplexity:.1f}")

# %%
# In the full build (40 states, 400 sweeps) the largest states were recognizably word classes:
# determiners (*the a her his no this its your an my*), past-tense verbs (*was had said went
# were could would*), subject pronouns (*she i it you alice they he*), nouns of the story
# (*queen time king mock hatter gryphon*), adjectives (*little very march great white*), and
# the held-out perplexity was 222 against 323 for the unigram model.  The quick CI build
# (5,000 training words, 10 sweeps) shows little of this.

# %%
# A base shared by the states: the HCRP emission prior
# ----------------------------------------------------
# The RCD paper puts a hierarchical prior on the emissions: each state's word distribution is
# drawn around one base distribution ``phi`` over the words, shared by all states
# (``probs_k | phi ~ Dir(s phi)``, ``phi ~ Dir(b0 / V)``), so a word frequent somewhere is
# a priori likely everywhere.  :func:`numpyro_hdphmm.emissions.hierarchical_categorical` declares
# ``phi`` inside the model; every kernel draws it exactly each sweep (given tables of the states'
# emission restaurants), and the scale ``s`` too when it is a Gamma site, as here.


def hcrp_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
    s = numpyro.sample("s", dist.Gamma(1.0, 1.0))
    shared = nh.emissions.hierarchical_categorical("phi", V, concentration=s, base_concentration=1.0)
    nh.sample("y", nh.HDPHMM(gamma=gamma, alpha=alpha, emission=shared, max_states=MAX_STATES), obs=y)


kernel = nh.infer.WeakLimitGibbs(hcrp_model)
print(kernel.update_plan(train))
mcmc_hcrp = MCMC(kernel, num_warmup=NUM_WARMUP, num_samples=NUM_SAMPLES, num_chains=1, progress_bar=False)
mcmc_hcrp.run(jax.random.key(1), train)
hcrp = mcmc_hcrp.get_samples()
phi = np.asarray(hcrp["phi"]).mean(0)
print(f"s: posterior mean {float(np.mean(hcrp['s'])):.1f}; states in use (last draw): "
      f"{int(hcrp['y_num_states'][-1])}")
print("heaviest words of the shared base phi:", ", ".join(f"{vocabulary[w]} {phi[w]:.3f}"
                                                          for w in np.argsort(-phi)[:12]))

# %%
# The base's heaviest words are the frequent function words, which every state can now emit
# without having seen them; ``s`` says how far the states stray from it.  (The held-out
# perplexity of this model is scored in the benchmarks, "RCD Table 2 on Alice: the HCRP emission
# prior", from each draw's seating: the explicit draws of ``probs_k`` give the few test words
# never seen in training almost no mass.)
