-- The chain's head follows every record appended, in the statement that appends it: an append
-- is then one prepared INSERT (which holds the write lock from its start, checks the head it
-- expects and moves it, atomically).
CREATE TRIGGER audit_head_follows AFTER INSERT ON audit_records
BEGIN
    UPDATE audit_head SET seq = NEW.seq, record_hash = NEW.record_hash WHERE id = 1;
END;
