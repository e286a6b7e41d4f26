'use strict'

// Every part of undici that io-hygiene reaches outside its index is here.
// Why not undici's index: our global dispatcher is often made while undici's
// index is still loading (its lib/global.js reads the slot before the index
// has exported anything), when require('undici') returns a half-filled
// object; these files are complete by then. test/http-undici.test.js fails on
// the first undici release that moves or renames one of them.
const Agent = require('undici/lib/dispatcher/agent')
const Dispatcher1Wrapper = require('undici/lib/dispatcher/dispatcher1-wrapper')

module.exports = {
  Agent,
  Pool: require('undici/lib/dispatcher/pool'),
  Client: require('undici/lib/dispatcher/client'),
  Dispatcher: require('undici/lib/dispatcher/dispatcher'),
  Dispatcher1Wrapper,
  errors: require('undici/lib/core/errors'),
  isFormDataLike: require('undici/lib/core/util').isFormDataLike,
  // Loaded by the first FormData body only (agent.js's ownFormData()).
  formData: () => ({ FormData: require('undici/lib/web/fetch/formdata').FormData, isFormData: require('undici/lib/web/webidl').webidl.is.FormData }),
}
