'use strict'

// `node -r io-hygiene/register app.js`: installs before the application
// loads (so sockets created at start-up already use the cache), configured
// from IO_HYGIENE_* environment variables (see the README). An install() in
// the application's code afterwards returns this installation.
const { installFrom } = require('./lib/install')

installFrom({}, 'node -r io-hygiene/register (IO_HYGIENE_* variables)', { preloaded: true })
