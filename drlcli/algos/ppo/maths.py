"""PPO's maths in one place: every quantity the update computes, as the papers name it.

Pure functions, no state, no Ray, no I/O; the learner (``learner.py``) is the shell that feeds
them a round and steps the optimiser. Read top to bottom, this is the algorithm:

1. **Advantages** (``compute_gae``; Schulman et al. 2016, "High-Dimensional Continuous Control
   Using Generalized Advantage Estimation", eq. 16; PPO paper eqs. 11-12)::

       delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
       A_t     = delta_t + (gamma * lambda) * A_{t+1},     R_t = A_t + V(s_t)

   then standardised over the round (``standardize_advantages``; a recurrent round's real
   steps, ``standardize_masked``).
2. **The objective** (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eqs. 7
   and 9), maximised; ``ppo_loss`` returns its negation for gradient descent::

       r_t(theta) = pi_theta(a_t | s_t) / pi_theta_old(a_t | s_t)
       L^CLIP     = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ]      policy_loss
       L^VF       = E_t[ (V_theta(s_t) - R_t)^2 ] / 2                        value_loss
       S          = E_t[ entropy of pi_theta(. | s_t) ]
       L          = L^CLIP - c1 L^VF + c2 S                                   ppo_loss

   ``eps`` is ``clip_coef``, ``c1`` ``vf_coef``, ``c2`` ``ent_coef``; ``clip_value_loss``
   takes PPO2's pessimistic clipped value error instead of ``L^VF``'s.
3. **How far the policy moved** (diagnostics and stopping rules): ``approx_kl`` (the k3
   estimator of KL(pi_old || pi_theta)), ``clip_fraction``, ``explained_variance``.
4. **The stabilisers**: ``adapted_learning_rate`` (the step size from the measured KL, as
   rsl_rl) and ``rpo_shifted_actions`` (Robust Policy Optimization, Rahman and Xue 2022).

Every mean is over a minibatch's samples or, with ``mask``, a recurrent minibatch's real steps
(padding never counts). ``closed_form.py`` differentiates this objective by hand for the
built-in networks; its tests hold it to autograd of ``ppo_loss``.
"""

from __future__ import annotations

import numpy as np
import torch

from drlcli.algos.ppo.params import ADAPTIVE_KL_BOUNDS, ADAPTIVE_KL_FACTOR, PPOParams

# --- 1. advantages --------------------------------------------------------------------------


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation, episode-boundary aware.

    All inputs have shape ``[T, num_envs]`` (time first). ``next_values[t]`` is ``V(s_{t+1})``
    where ``s_{t+1}`` is the observation the step returned *before* any reset: on a truncated
    step it is the final observation of the episode, not the first one of the next.

        delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},  done = terminated | truncated

    ``terminated`` removes the bootstrap (the task really ended); ``truncated`` keeps it (a time
    limit is not a terminal state). Both cut the recursion, so no advantage flows from a new
    episode back into the previous one. The last step's ``A_{T}`` is 0.

    Returns:
        ``(advantages, returns)``, float64 ``[T, num_envs]``, with ``returns = advantages + values``
        (the value-function target).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    next_values = np.asarray(next_values, dtype=np.float64)
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool)
    shape = rewards.shape
    for name, array in (
        ("values", values),
        ("next_values", next_values),
        ("terminated", terminated),
        ("truncated", truncated),
    ):
        if array.shape != shape:
            raise ValueError(f"compute_gae: {name} has shape {array.shape}, rewards {shape}")

    bootstrap = 1.0 - terminated
    continues = 1.0 - (terminated | truncated)
    deltas = rewards + gamma * bootstrap * next_values - values
    advantages = np.zeros_like(rewards)
    running = np.zeros(shape[1:], dtype=np.float64)
    for t in reversed(range(shape[0])):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values


def standardize_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """``(A - mean) / (std + 1e-8)`` over the whole round (not per minibatch)."""
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def standardize_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(x - mean) / (std + 1e-8)`` over the real steps (the unbiased std, as
    ``standardize_advantages`` of an MLP's round); padding comes out 0."""
    real = values[mask]
    standardized = (values - real.mean()) / (real.std() + 1e-8)
    return torch.where(mask, standardized, torch.zeros_like(values))


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` over the real steps (``mask`` True), any equal shapes."""
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum()


def _step_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``E_t``: the mean over a minibatch's samples, or over a recurrent minibatch's real steps."""
    return values.mean() if mask is None else masked_mean(values, mask)


# --- 2. the objective -----------------------------------------------------------------------


def ppo_loss(
    *,
    new_logprob: torch.Tensor,
    entropy: torch.Tensor,
    new_value: torch.Tensor,
    old_logprob: torch.Tensor,
    old_value: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    params: PPOParams,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``-L = -L^CLIP + c1 L^VF - c2 S`` of one minibatch (CleanRL's names in the stats).

    Every tensor is ``[B]``: the policy's log-prob and entropy of the stored actions now, the
    value now, the log-prob and value at sampling time, the (already normalised) advantages
    and the value targets. A recurrent policy's are ``[L, C]`` chunks, with ``mask`` (bool,
    the same shape) true on real steps: the means are over those alone.

    Returns:
        ``(loss, stats)``: ``loss = pg_loss + vf_coef * v_loss - ent_coef * entropy_loss``;
        stats ``pg_loss``, ``v_loss``, ``entropy_loss`` (0-dim) and ``logratio`` (detached,
        of the real steps), from which the caller measures the approximate KL.
    """
    policy_objective, stats = policy_loss(
        new_logprob=new_logprob,
        entropy=entropy,
        old_logprob=old_logprob,
        advantages=advantages,
        params=params,
        mask=mask,
    )
    v_loss = value_loss(
        new_value=new_value, old_value=old_value, returns=returns, params=params, mask=mask
    )
    stats["v_loss"] = v_loss.detach()
    return policy_objective + params.vf_coef * v_loss, stats


def policy_loss(
    *,
    new_logprob: torch.Tensor,
    entropy: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    params: PPOParams,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The policy's part of ``ppo_loss``: ``-L^CLIP - c2 S``, and its stats (``pg_loss``,
    ``entropy_loss``, ``logratio``). It reads no value, so its gradient reaches the policy's
    parameters alone."""
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1 - params.clip_coef, 1 + params.clip_coef)
    pg_loss = _step_mean(torch.max(pg_loss1, pg_loss2), mask)
    entropy_loss = _step_mean(entropy, mask)
    objective = pg_loss
    if params.ent_coef:  # a zero coefficient would only add backward work
        objective = objective - params.ent_coef * entropy_loss
    stats = {
        "pg_loss": pg_loss.detach(),
        "entropy_loss": entropy_loss.detach(),
        "logratio": (logratio if mask is None else logratio[mask]).detach(),
    }
    return objective, stats


def value_loss(
    *,
    new_value: torch.Tensor,
    old_value: torch.Tensor,
    returns: torch.Tensor,
    params: PPOParams,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``L^VF``, half the squared error of the values to their targets (with
    ``clip_value_loss``, the larger of it and the clipped value's, as PPO2 does)."""
    v_loss_unclipped = (new_value - returns) ** 2
    if not params.clip_value_loss:
        return 0.5 * _step_mean(v_loss_unclipped, mask)
    v_clipped = old_value + torch.clamp(new_value - old_value, -params.clip_coef, params.clip_coef)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * _step_mean(torch.max(v_loss_unclipped, v_loss_clipped), mask)


# --- 3. how far the policy moved ------------------------------------------------------------


def approx_kl(logratio: torch.Tensor | np.ndarray) -> float:
    """``E[(r - 1) - log r]``: the k3 estimator of KL(old || new), >= 0 (Schulman 2020)."""
    ratio = np.exp(logratio) if isinstance(logratio, np.ndarray) else logratio.exp()
    return float((ratio - 1 - logratio).mean())


def clip_fraction(logratio: torch.Tensor, clip_coef: float) -> float:
    """The fraction of samples whose ratio ``r_t`` lies outside ``[1 - eps, 1 + eps]``."""
    return ((logratio.exp() - 1).abs() > clip_coef).float().mean().item()


def explained_variance(predicted: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var[R - V] / Var[R]``: 1 when the values predict the targets, 0 when they explain
    nothing; NaN when the targets do not vary."""
    residual_var = torch.var(returns - predicted)
    returns_var = torch.var(returns)
    return (1 - residual_var / returns_var).item() if returns_var > 0 else float("nan")


# --- 4. the stabilisers ---------------------------------------------------------------------


def adapted_learning_rate(learning_rate: float, kl: float, desired_kl: float) -> float:
    """The ``adaptive_kl`` schedule's next step size after a minibatch whose approximate KL is
    ``kl``: divided by ``ADAPTIVE_KL_FACTOR`` above ``2 * desired_kl``, multiplied by it below
    ``desired_kl / 2``, kept within ``ADAPTIVE_KL_BOUNDS`` (rsl_rl's rule). A KL that is not
    finite leaves it as it is: the round's non-finite check names the cause."""
    low, high = ADAPTIVE_KL_BOUNDS
    if kl > 2.0 * desired_kl:
        return max(low, learning_rate / ADAPTIVE_KL_FACTOR)
    if kl < 0.5 * desired_kl:
        return min(high, learning_rate * ADAPTIVE_KL_FACTOR)
    return learning_rate


def rpo_shifted_actions(
    actions: torch.Tensor, alpha: float, generator: torch.Generator
) -> torch.Tensor:
    """Robust Policy Optimization's perturbation, as the stored actions shifted by ``-z``,
    ``z ~ U(-alpha, alpha)`` per sample and action dimension: for a policy distribution located
    at its mean (the Gaussian of a ``clip`` actor), ``log pi(a | mu + z) = log pi(a - z | mu)``,
    so every actor's ``log_prob_and_entropy`` and the closed form compute RPO's loss unchanged.
    ``actions``: ``[..., A]``; ``z`` is drawn on the CPU from ``generator`` (the learner's
    checkpointed minibatch generator: a resumed run draws the same noise)."""
    noise = torch.rand(actions.shape, generator=generator, dtype=actions.dtype)
    return actions - (2.0 * noise - 1.0).mul_(alpha).to(actions.device)
