-- Cost control (SPEC section 16). Every model call's usage as the provider reported it, with
-- what it cost at the configured prices (0 and priced = 0 for a model without a price).
-- Days are UTC dates (YYYY-MM-DD): reports and caps group by them.
CREATE TABLE model_usage (
    id                  BIGSERIAL PRIMARY KEY,
    at                  BIGINT NOT NULL,
    day                 TEXT NOT NULL,
    session_key         TEXT NOT NULL,
    agent               TEXT NOT NULL,
    channel             TEXT NOT NULL,
    chat                TEXT NOT NULL,
    user_id             TEXT,
    kind                TEXT NOT NULL,
    model               TEXT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    cache_write_tokens  BIGINT NOT NULL,
    cost_usd            DOUBLE PRECISION NOT NULL,
    priced              BIGINT NOT NULL
);
CREATE INDEX model_usage_by_day ON model_usage (day);
CREATE INDEX model_usage_by_user ON model_usage (user_id, day);
CREATE INDEX model_usage_by_chat ON model_usage (chat, day);
-- What each configured cap holds for a period: settled costs plus reservations of calls in
-- flight. A reservation only goes in while the sum stays within the cap (one statement per
-- budget, so processes sharing the database cannot both take the last dollar).
CREATE TABLE budget_spend (
    budget    TEXT NOT NULL,
    period    TEXT NOT NULL,
    spent_usd DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (budget, period)
);
-- Messages each person sent within the longest rate window (older ones are dropped).
CREATE TABLE rate_hits (
    subject TEXT NOT NULL,
    at      BIGINT NOT NULL
);
CREATE INDEX rate_hits_by_subject ON rate_hits (subject, at);
