/** One error family, as the Python participant's `ParticipantError`: anything a service or a record can cause. */
export class ParticipantError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A record this collection cannot take: `field` names what is wrong. Nothing was drawn. */
export class RecordError extends ParticipantError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

/** A spec the service may publish but this library refuses, naming what is wrong. */
export class SpecError extends ParticipantError {}

/** Base of the errors of talking to a service (the client and its ledger), as the Python participant's `ClientError`. */
export class ClientError extends ParticipantError {}

/** This device already reported to the collection: a second report would spend ε again. */
export class AlreadyReported extends ClientError {}
