-- Queue views (core's QueueView, read by the console's overview and /metrics): the indexes their windows need where
-- the completions live in a permanent table that no other part of the reading scans. A family whose counts by state
-- read the whole table anyway takes its windows from that same pass and needs none here; the oldest due item of
-- every family comes from its claim index.

-- Envelopes accepted in the last hour (envelope-inbox): identities are permanent, the largest inbox table; the ingest
-- function writes accepted_at from a clock that only moves forward, so new entries land at the index's right edge.
CREATE INDEX inbox_identities_accepted ON inbox_identities (accepted_at);

-- Wakes completed in the last hour (idle-wake, cloud): the `awake` audit rows that a successful wake writes with its
-- transition; the audit keeps every change of every stack, the partial index only the wakes.
CREATE INDEX idle_wake_cloud_audit_woke ON idle_wake_cloud_audit (at) WHERE action = 'awake';
