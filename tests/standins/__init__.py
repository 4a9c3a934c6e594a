"""Stand-ins for vendor SDKs that are compiled modules with no protocol we can serve: the subset
of each SDK's API that a backend calls, same names, signatures and enums, over a small motion
model. Tests put one in `sys.modules` under the SDK's name before the backend connects; the
signature tests check the stand-in against the real SDK (or against facts read from its wheel).
"""
