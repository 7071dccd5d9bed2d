-- The operator console's list of the connector events a stack recorded (packages/idle-wake, tenant side), newest first
-- with keyset paging on (received_at, event_id), optionally one connector instance's: an index walk from the newest
-- end, never a sort of every receipt the stack kept.
CREATE INDEX idle_wake_connector_events_received ON idle_wake_connector_events (received_at, event_id);
CREATE INDEX idle_wake_connector_events_connector ON idle_wake_connector_events (connector_instance, received_at, event_id);
