-- Migration 0021 down, handwritten: drop the RLQS server's tables with their rows (the division restarts; a
-- server without them holds grants back for one TTL after it starts).
DROP TABLE rl.quota_client;
DROP TABLE rl.quota_bucket;
