-- The next sighting number is MAX(seen_seq) + 1, asked on every version recorded: without an
-- index that is a scan of every version of every resource.
CREATE INDEX resource_versions_by_seen ON resource_versions (seen_seq);
