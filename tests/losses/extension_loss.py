"""A loss that exists only in the tests: GRPO at half strength, with its row weights. It shows what a
new loss touches: its own module (this file) and one `losses.catalog.register_loss` call."""

from losses.pg import grpo, token_row_weights


def half_grpo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
              rollout_is_weights=None, group_ids=None):
    loss, metrics = grpo(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
    return 0.5 * loss, metrics


def half_grpo_row_weights(log_prob, old_log_prob, advantages, response_mask, group_ids=None, config=None):
    return 0.5 * token_row_weights(log_prob, old_log_prob, advantages, response_mask, group_ids, config)
