ALTER TABLE calls RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
DROP TABLE IF EXISTS retention_marks;
ALTER TABLE calls DROP COLUMN IF EXISTS result_expired_at;
