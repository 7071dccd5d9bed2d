import { SIGNER_KEYS, SIGNER_KEYS_FILE } from "./KeySource.ts"
import { SIGNER_REPLAY_WINDOW } from "./Signer.ts"

/** Every variable the signer reads, in the shape of the backend's configuration table. */
export const SIGNER_CONFIG: ReadonlyArray<{
  readonly name: string
  readonly default: string
  readonly meaning: string
  readonly secret: boolean
}> = [
  {
    name: SIGNER_REPLAY_WINDOW,
    default: "90 days",
    meaning: "how long a retired key keeps verifying and a revoked key is kept before purge (the inbox payload retention)",
    secret: false
  },
  {
    name: SIGNER_KEYS,
    default: "(unset: no private keys, verify only)",
    meaning: "tenant signing keys: JSON {\"tenant\":{\"keyId\":\"<key>\"}} or tenant:keyId:<key>,...; <key> is unpadded base64url of the 32-byte Ed25519 seed or its 48-byte PKCS#8 DER",
    secret: true
  },
  {
    name: SIGNER_KEYS_FILE,
    default: "(unset)",
    meaning: "development only: path of a JSON key file (SIGNER_KEYS's JSON form) outside the repository, mode 0600/0400; refused together with SIGNER_KEYS",
    secret: false
  }
]
