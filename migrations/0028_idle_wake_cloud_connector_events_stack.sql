-- The operator console's list of one stack's broker events (packages/idle-wake, cloud), oldest first with keyset
-- paging on (received_at, id), optionally filtered by state: an index walk inside the stack, never a sort of the
-- whole queue (delivered and dead events stay in the table).
CREATE INDEX idle_wake_cloud_connector_events_stack ON idle_wake_cloud_connector_events (stack_id, received_at, id);
