-- Reading every bot message of a channel after a sequence number (webhook event stream).
CREATE INDEX outbox_by_channel ON outbox (channel, id);
