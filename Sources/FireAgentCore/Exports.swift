// FireAgentCore's users (fire-agent, the tests) see the agent logic that already moved into the
// Embedded subset (FireAgentBase) as part of this module.
@_exported import FireAgentBase
