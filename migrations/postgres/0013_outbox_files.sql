-- Files sent back (send_file): the file to deliver with the row's text as its caption, JSON
-- {path, name, mime}. NULL for plain messages.
ALTER TABLE outbox ADD COLUMN file TEXT;
