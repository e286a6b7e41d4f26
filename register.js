'use strict'

// `node -r io-hygiene/register app.js` (or `--import io-hygiene/register.js`):
// installs before the application loads (so sockets created at start-up
// already use the cache), configured from IO_HYGIENE_* environment variables
// (see the README). An install() in the application's code afterwards
// returns this installation. `register`, with no extension, holds the same
// code (test/install.test.js keeps the two equal).
const { installFrom } = require('./lib/install')

installFrom({}, 'node -r io-hygiene/register (IO_HYGIENE_* variables)', { preloaded: true })
