'use strict'

// `node -r io-hygiene/register app.js`: installs before the application
// loads (so sockets created at start-up already use the cache), configured
// from IO_HYGIENE_* environment variables (see the README).
const { install, modules } = require('./install')
const { optionsFromEnv } = require('./env')

install(optionsFromEnv(modules))
