-- Operator alerts (SPEC section 21). One row per open incident (`key`: "channel:telegram",
-- "deliveries:discord", "store", "mcp:files", "approvals", "budget:total:daily"): whichever
-- process leads sends its alert once (the UPDATE that sets `alerted_ms` from NULL) and its
-- "resolved" once (the DELETE that returns the row), across restarts and leader changes.
CREATE TABLE alert_incidents (
    key        TEXT PRIMARY KEY,
    since_ms   BIGINT NOT NULL,
    alerted_ms BIGINT
);

-- The leading process's view of the channels it receives for, so that a follower (which
-- does not run those receivers) reports their state instead of guessing.
CREATE TABLE channel_health (
    channel TEXT PRIMARY KEY,
    health  TEXT NOT NULL,
    at_ms   BIGINT NOT NULL
);

-- When a call was last refused by a cap in a period (the cost gate writes it): a
-- service-wide cap that refused a call is an incident until its period ends.
CREATE TABLE budget_refusals (
    budget TEXT NOT NULL,
    period TEXT NOT NULL,
    at_ms  BIGINT NOT NULL,
    PRIMARY KEY (budget, period)
);

-- Messages given up after their turn killed the process MAX_TURN_ATTEMPTS (3) times, by when
-- they were answered (the alert asks for the last hour's).
CREATE INDEX inbound_given_up ON inbound (done_at) WHERE attempts >= 3;
