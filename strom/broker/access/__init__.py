"""Who may: SASL authentication of a connection, authorization of a request, the ACL
and SCRAM credential APIs, and client quotas. The mechanisms and the authorizer
themselves are in ``strom.security``."""
