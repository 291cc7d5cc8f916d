"""Security: who a connection is (principals), how it proved it (TLS, SASL), and what it
may do (ACLs) and how fast (quotas)."""
