-- The chain's head is marked on its own record (`head = 1`) rather than kept in a row of another
-- table. SQLite writes every page a commit changed to the write-ahead log, and `audit_head` is
-- a page of its own: an append wrote two pages (its record's and the head's) where it now
-- writes one, the newest records sharing a page.
--
-- An append gives its record `head = 1` only if the record before it is the head, with the hash
-- the append chains to (the direct append's statement asks, a transaction that read the head
-- says so itself), and the trigger below moves the mark: a record inserted anywhere else is
-- refused. The marked record cannot be deleted, so retention keeps it even when a checkpoint
-- covers it (the trail is read from the checkpoint on), and a deleted last record is seen: the
-- last one left is not marked.
--
-- `audit_head` is no longer written; it still names the head of a trail whose records were
-- all removed by retention before this step.
ALTER TABLE audit_records ADD COLUMN head INTEGER;

UPDATE audit_records SET head = 1
 WHERE seq = (SELECT seq FROM audit_head WHERE id = 1)
   AND record_hash = (SELECT record_hash FROM audit_head WHERE id = 1);

DROP TRIGGER audit_head_follows;

CREATE TRIGGER audit_follows_its_head BEFORE INSERT ON audit_records
WHEN NEW.head IS NOT 1
BEGIN
    SELECT RAISE(ABORT, 'an audit record goes in only after the chain''s head');
END;

CREATE TRIGGER audit_head_moves AFTER INSERT ON audit_records
BEGIN
    UPDATE audit_records SET head = NULL
     WHERE seq = (SELECT max(seq) FROM audit_records WHERE seq < NEW.seq) AND head = 1;
END;

CREATE TRIGGER audit_head_stays BEFORE DELETE ON audit_records
WHEN OLD.head = 1
BEGIN
    SELECT RAISE(ABORT, 'the audit chain''s head cannot be deleted');
END;
