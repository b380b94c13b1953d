-- A resource's latest version is asked for on every fresh fetch (is the content seen again the
-- latest?). Without this index that is every version of the resource, content included, put in
-- a temporary B-tree to be sorted by sighting: 0.7 ms for three versions of 1 MiB.
CREATE INDEX resource_versions_latest ON resource_versions (server, uri, seen_seq);
