"""The import page's form: a configuration file, uploaded or pasted."""

from __future__ import annotations

from django import forms

from console.kernel.limits import too_large
from strategies.exchange.format import MAX_FILE_BYTES


class ConfigUploadForm(forms.Form):
    file = forms.FileField(required=False, label="Configuration file (.json)")
    text = forms.CharField(
        required=False,
        label="…or paste it",
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "mono"}),
    )

    def content(self) -> bytes | str:
        """The file's bytes (the upload wins over the pasted text); 413 over the limit."""
        upload = self.cleaned_data.get("file")
        if upload is not None:
            if upload.size > MAX_FILE_BYTES:
                raise too_large("The configuration file", MAX_FILE_BYTES)
            return upload.read()
        text = self.cleaned_data.get("text") or ""
        if len(text.encode()) > MAX_FILE_BYTES:
            raise too_large("The configuration file", MAX_FILE_BYTES)
        return text

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("file") and not (cleaned.get("text") or "").strip():
            raise forms.ValidationError("Choose a file exported from a console, or paste one.")
        return cleaned
