--- The public entry `require("flemma.secrets")` (see :help flemma-api): the module lives in
--- lua/flemma/policy/secrets.lua.
return require("flemma.policy.secrets")
