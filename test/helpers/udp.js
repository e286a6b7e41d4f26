'use strict'

const dgram = require('node:dgram')

// Binds a UDP socket for a test server: resolves with it once it listens,
// rejects with the bind error. `onMessage(msg, rinfo)` gets every datagram.
function bindUdp ({ port = 0, address = '127.0.0.1', onMessage, ...options }) {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket({ type: address.includes(':') ? 'udp6' : 'udp4', ...options })
    socket.once('error', reject)
    socket.on('message', onMessage)
    socket.bind(port, address, () => {
      socket.off('error', reject)
      resolve(socket)
    })
  })
}

module.exports = { bindUdp }
