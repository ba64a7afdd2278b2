from django.http import JsonResponse
from django.urls import path


def bare(request):
    """The baseline: a Django view that returns a small JSON document, nothing else."""
    return JsonResponse({"agent": "assistant_professional", "ok": True})


urlpatterns = [path("bare", bare)]
