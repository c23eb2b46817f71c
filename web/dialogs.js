// The two modal dialogs: a name (create / rename, with the server's error shown in place)
// and a confirmation (delete). Used by sidebar.js and manage.js; app.js wires their buttons.
import { ui } from "./ui.js";

/** The open name dialog's `submit`, until it succeeds. */
let nameSubmit = null;

/** Name dialog; `submit(value)` returns an error text to keep it open, or null. */
export function askName({ title, label, ok, value, required, submit }) {
  ui.nameTitle.textContent = title;
  ui.nameLabel.textContent = label;
  ui.nameOk.textContent = ok;
  ui.nameInput.value = value || "";
  ui.nameInput.required = !!required;
  ui.nameError.hidden = true;
  ui.nameError.textContent = "";
  ui.nameDialog.dataset.purpose = title;
  nameSubmit = submit;
  ui.nameDialog.showModal();
  ui.nameInput.focus();
  ui.nameInput.select();
}

/** The name form was submitted (app.js wires it): run the pending `submit`. */
export async function submitName(ev) {
  ev.preventDefault();
  const submit = nameSubmit;
  if (!submit) return;
  ui.nameOk.disabled = true;
  ui.nameError.hidden = true;
  try {
    const error = await submit(ui.nameInput.value);
    if (error) {
      ui.nameError.textContent = error;
      ui.nameError.hidden = false;
      ui.nameInput.focus();
    } else {
      nameSubmit = null;
      ui.nameDialog.close();
    }
  } finally {
    ui.nameOk.disabled = false;
  }
}

/** Confirmation dialog; resolves true (confirmed) or false. */
export function confirmDialog({ title, text, ok }) {
  ui.confirmTitle.textContent = title;
  ui.confirmText.textContent = text;
  ui.confirmOk.textContent = ok;
  ui.confirmError.hidden = true;
  return new Promise((resolve) => {
    const done = (v) => {
      ui.confirmForm.removeEventListener("submit", onSubmit);
      ui.confirmDialog.removeEventListener("close", onClose);
      resolve(v);
    };
    const onSubmit = (ev) => {
      ev.preventDefault();
      ui.confirmDialog.dataset.result = "ok";
      ui.confirmDialog.close();
    };
    const onClose = () => done(ui.confirmDialog.dataset.result === "ok");
    ui.confirmDialog.dataset.result = "";
    ui.confirmForm.addEventListener("submit", onSubmit);
    ui.confirmDialog.addEventListener("close", onClose);
    ui.confirmDialog.showModal();
    ui.confirmCancel.focus();
  });
}
